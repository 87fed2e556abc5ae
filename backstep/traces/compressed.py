"""Gzip traces (``trace -o run.jsonl.gz``): written through ``gzip``, read back by streaming.

``history`` streams the decompressed lines (``open_lines``); ``show``, ``diff`` and ``export``
read a trace by offset (``TraceIndex``), so a compressed one is first decompressed, streaming,
into an unnamed temporary file (``unpacked``) that goes when it is closed. A gzip stream cut
short (a killed run) gives what it holds. Stdlib only.
"""

from __future__ import annotations

import gzip
import tempfile
import zlib
from typing import IO, Any

MAGIC = b"\x1f\x8b"


def wants_gzip(path: str) -> bool:
    """Is ``path`` a name that asks for a compressed trace?"""
    return path.endswith(".gz")


class GzipTrace(gzip.GzipFile):
    """The gzip stream a trace is written to; ``raw`` is the file's, so that a forked child
    lets go of it without writing the parent's pending bytes (``process.forks.abandon_file``)."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(fileobj=file, mode="wb", compresslevel=6)
        self.file = file

    @property
    def raw(self) -> Any:
        return getattr(self.file, "raw", self.file)

    def cut_back(self) -> int | None:
        """After a failed write (a full disk), once closed: the whole lines the file holds, as
        a reader reads them back (``whole_lines``). The file is left as it is: its bytes are a
        compressed stream, so cutting it at its last newline byte (what a plain trace is cut
        back to) would cut the stream at a random place and count bytes, not events."""
        return whole_lines(self.name) if isinstance(self.name, str) and self.name else None

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.file.close()


def is_gzip(file: IO[bytes]) -> bool:
    """Does the open file ``file`` start with gzip's magic? (Its position is kept.)"""
    at = file.tell()
    try:
        return file.read(2) == MAGIC
    finally:
        file.seek(at)


def _chunks(source: IO[bytes]) -> Any:
    """The decompressed bytes of ``source``, block by block, as far as they go: a stream cut
    short gives all it holds (``zlib``, not ``gzip``, which drops the last block's bytes).
    Returns through StopIteration's value whether the stream was whole."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    fed = False  # the current member has had bytes (a new one after a member's end has not)
    while True:
        block = source.read(1 << 20)
        if not block:
            tail = inflate.flush()
            if tail:
                yield tail
            return inflate.eof or not fed
        while block:
            fed = True
            try:
                data = inflate.decompress(block)
            except zlib.error:
                return False
            if data:
                yield data
            if inflate.eof:  # a member ended: another may follow (concatenated gzip files)
                block = inflate.unused_data
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                fed = False
                if not block:
                    break
            else:
                block = b""


def _copy(source: IO[bytes], target: IO[bytes]) -> bool:
    """Decompress ``source`` into ``target``; False when the stream was cut short."""
    chunks = _chunks(source)
    while True:
        try:
            target.write(next(chunks))
        except StopIteration as end:
            return bool(end.value)


def whole_lines(path: str) -> int | None:
    """How many whole lines (events) the gzip file ``path`` holds, read as far as it goes (a
    stream cut short holds what was compressed before the cut); None when it cannot be read."""
    try:
        with open(path, "rb") as file:
            chunks = _chunks(file)
            lines = 0
            while True:
                try:
                    lines += next(chunks).count(b"\n")
                except StopIteration:
                    return lines
    except OSError:
        return None


def unpacked(file: IO[bytes]) -> tuple[IO[bytes], bool]:
    """``file`` itself, or for a gzip file an unnamed temporary file holding its lines (``file``
    closed); and whether the compressed stream was whole."""
    if not is_gzip(file):
        return file, True
    target = tempfile.TemporaryFile()  # noqa: SIM115 - the caller's to close
    try:
        whole = _copy(file, target)
        target.flush()
    except BaseException:
        target.close()
        raise
    finally:
        file.close()
    target.seek(0)
    return target, whole


class _Lines:
    """The lines of a gzip stream, ending quietly where a cut-short stream ends."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.whole = True

    def __iter__(self) -> Any:
        rest = b""
        chunks = _chunks(self.file)
        while True:
            try:
                data = next(chunks)
            except StopIteration as end:
                self.whole = bool(end.value)
                break
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line + b"\n"
        if rest:
            yield rest

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def open_lines(path: str) -> Any:
    """A trace's lines, streamed (a context manager that iterates over lines of bytes)."""
    file = open(path, "rb")  # noqa: SIM115 - closed by the context manager
    try:
        if is_gzip(file):
            return _Lines(file)
    except BaseException:
        file.close()
        raise
    return file
