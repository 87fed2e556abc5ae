"""A trace file's bytes, read with ``pread`` rather than memory-mapped.

A mapping of a file that another process truncates (``backstep trace -o same.jsonl`` while
``show`` has it open) kills the reader with SIGBUS at the first touch of a page past the new end:
a signal Python cannot catch, which left the terminal in the alternate screen with mouse mode on.
A read here comes back short instead; ``cut`` then says where the file ended, and the index keeps
what it read before. The file is read a block at a time, so a gigabyte trace costs a block of
memory, and a line longer than a block (a 100 MB ``output`` event) is walked over, not loaded.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence

BLOCK = 1 << 22  # bytes read at once while walking lines
SPAN = 1 << 26  # bytes of a pass's lines read at once, to be sliced into lines
HEAD = 64  # bytes of a line's start that the index looks at


def not_regular(path: str) -> str | None:
    """Why ``path`` cannot be read as a trace file without hanging or lying (None: it can).

    Opening a FIFO blocks until a writer comes; a pipe (``/dev/stdin``, ``<(cat a)``) or a
    device has no size, so it would read as empty. A directory is left to ``open()`` to refuse."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # open() says why, in its own words
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    what = ("a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device")
    return f"{path} is {what}: backstep reads trace files; save it to a file first"


class FileBytes:
    """The first ``size`` bytes of an open file (its size when opened), read on demand."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.cut: int | None = None  # the file's size once a read found it shorter

    def read(self, start: int, end: int) -> bytes | None:
        """The bytes ``[start, end)``, or None when the file no longer holds them all."""
        data = self._some(start, end)
        return data if len(data) == end - start else None

    def _some(self, start: int, end: int) -> bytes:
        """The bytes ``[start, end)``, or as many of them as the file still holds."""
        want = end - start
        data = os.pread(self.fd, want, start)
        if len(data) == want:
            return data
        parts, got = [data], len(data)
        while got < want:  # one pread returns at most ~2 GiB
            more = os.pread(self.fd, want - got, start + got)
            if not more:
                self._shrunk()
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def each(self, starts: Sequence[int], ends: Sequence[int]) -> Iterator[bytes | None]:
        """The bytes of each line ``[starts[i], ends[i])``, in file order (None: the file no
        longer holds it); one read for them all when they lie within ``SPAN`` bytes."""
        if not starts:
            return
        low, high = starts[0], ends[-1]
        data = self.read(low, high) if 0 <= high - low <= SPAN else None
        if data is None:
            for start, end in zip(starts, ends, strict=True):
                yield self.read(start, end)
            return
        for start, end in zip(starts, ends, strict=True):
            yield data[start - low:end - low]

    def lines(self, start: int, stop: int) -> Iterator[tuple[bytes, int, int, int, int]]:
        """Each line from byte ``start`` on, until one ends at or past ``stop``, as
        ``(data, at, to, first, end)``: the line is the file's bytes ``[first, end)`` and
        ``data[at:to]`` (a block shared by many lines). A line longer than a block comes as its
        first ``HEAD`` and last two bytes only. Stops early, with ``cut`` set, if the file
        shrank."""
        size = self.size
        while start < stop:
            data = self._some(start, min(size, start + BLOCK))
            base, length, at = start, len(data), 0
            find = data.find
            while True:
                newline = find(b"\n", at)
                if newline >= 0:
                    to = newline + 1
                elif base + length >= size:  # the last line, with no newline
                    to = length
                elif self.cut is not None:  # the file ends here now: its last line is cut
                    return
                elif at:
                    start = base + at  # a line cut by the block: read on from its start
                    break
                else:
                    end = self._line_end(base + length)
                    edge = None if end is None else self.read(end - 2, end)
                    if edge is None:
                        return
                    yield data[:HEAD] + edge, 0, HEAD + 2, base, end
                    start = end
                    break
                yield data, at, to, base + at, base + to
                at = to
                if base + at >= stop or at >= length:
                    start = base + at
                    break

    def _line_end(self, start: int) -> int | None:
        """Where the line going on at byte ``start`` ends (None: the file shrank)."""
        while start < self.size:
            data = self.read(start, min(self.size, start + BLOCK))
            if data is None:
                return None
            newline = data.find(b"\n")
            if newline >= 0:
                return start + newline + 1
            start += len(data)
        return self.size

    def _shrunk(self) -> None:
        try:
            self.cut = os.fstat(self.fd).st_size
        except OSError:
            self.cut = 0
