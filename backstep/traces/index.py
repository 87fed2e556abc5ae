"""An index of a ``backstep trace`` file: where each pass's lines are, so one pass reads alone.

A trace can be gigabytes (many iterations of a large model). ``show``, ``diff`` and ``export``
read it one pass at a time: opening scans the file once for line boundaries and the ``event`` and
``pass`` keys at the start of each line (the recorder always writes them first), never parsing
the gradient summaries; reading a pass seeks to its lines and parses only those. Passes of
several threads are interleaved in the file, so each pass keeps its own list of line offsets.

A damaged trace (a killed run, a half-written last line, corrupt lines, a newer schema version)
opens with what is valid; ``problems`` says what is not, and ``note()`` says it in one line. A
file that is not a trace at all (or a pipe or device, which has no size) raises ``TraceError``.
The file is read in blocks (``filebytes``), never mapped: one cut while open keeps what was read
(``cut``), where a mapping died by SIGBUS. Stdlib only: it works where torch is not installed.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from array import array
from collections.abc import Callable
from typing import Any

from backstep import safe_text
from backstep.events.form import expand
from backstep.events.spec import check
from backstep.protocol import VERSION
from backstep.traces import compressed, limits
from backstep.traces.filebytes import HEAD, FileBytes, not_regular
from backstep.traces.long_output import output_entry
from backstep.traces.passes import (
    BYTE_CODE,
    KIND_CODE,
    NODE_CODE,
    MalformedEvent,
    Pass,
    PassIndex,
    PassLines,
    TraceError,
)

# A line's opening as the recorder writes it: {"event":"node","pass":3,...
_HEAD = re.compile(rb'\{"event": ?"([A-Za-z_]+)"(?:, ?"pass": ?(\d+))?')
BRIEF = frozenset({"leaves", "history", "trip"})  # the run in brief: lines with no pass
LINES_KEPT = 3  # passes whose line offsets stay found (the one shown, the one read beside it)
REJECTIONS_KEPT = 1000  # malformed lines whose reason is kept (the first ones found)
TRIPS_KEPT = 1000  # ``trip`` events kept (trace --when: --trips of them, 3 by default)


class TraceIndex:
    """A trace file opened for reading by pass. Keep it open while reading; ``close()`` after.

    ``partial=True`` scans only until the first pass is complete (a first frame of a huge trace
    needs no more); ``scan()`` goes on in slices, and ``done`` says when the whole file is in.
    """

    def __init__(self, path: str | os.PathLike[str], *, partial: bool = False,
                 strict: bool = False) -> None:
        self.path = os.fspath(path)
        # strict: a malformed event raises MalformedEvent (diff, export); else it is skipped as
        # an unreadable line is, and ``rejected`` says why (start offset -> reason)
        self.strict = strict
        self.rejected: dict[int, str] = {}
        self._malformed = 0
        self._refused = -1  # the start of the last line _parse refused as malformed
        self._line_mark = (0, 1)  # (offset, its line number): where line_of counts on from
        self.session: dict[str, Any] | None = None
        self.exit: dict[str, Any] | None = None
        self.trips: dict[int, dict[str, Any]] = {}  # trace --when: a pass's trip (traces/trips)
        self.passes: dict[int, PassIndex] = {}
        self.problems: list[str] = []
        self.lines = 0
        self._corrupt: list[int] = []
        self._orphans = 0
        self._pos = 0
        self._first = True
        self._numbers: list[int] = []
        # told of each line of a pass as the scan finds it: (kind, pass, start, end)
        self.watch: Callable[[str, int, int, int], None] | None = None
        # the script's output (``output`` events, no pass): where each line is, in file order
        self.output_starts = array("q")
        self.output_ends = array("q")
        self._output_texts: list[tuple[str, str]] = []  # parsed so far, in order
        # the run in brief (``leaves``, ``history``, ``trip``: no pass key): where each line
        # is, in file order, for the UI's history view (``brief_lines``)
        self.brief_starts = array("q")
        self.brief_ends = array("q")
        self._lines: dict[int, tuple[tuple[int, int], PassLines]] = {}  # the latest few
        self.done = False
        self.cut = False  # the file shrank while open (see the module's docstring)
        if (refused := not_regular(self.path)) is not None:
            raise TraceError(refused)
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise TraceError(f"cannot open {self.path}: {exc.strerror or exc}") from None
        try:
            # a gzip trace (trace -o run.jsonl.gz): read from a decompressed temporary copy
            self._file, whole = compressed.unpacked(self._file)
            if not whole:
                self.problems.append("the compressed file is cut short: what it holds is read")
            size = os.fstat(self._file.fileno()).st_size
            if size == 0:
                raise TraceError(f"{self.path} is empty: no events were recorded")
            self._bytes = FileBytes(self._file.fileno(), size)
            if partial:
                self.scan(until_pass=True)
            else:
                self.scan()
        except BaseException:
            self._file.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def scan(self, budget: int | None = None, *, until_pass: bool = False) -> bool:
        """Index more of the file: ``budget`` bytes, or until one pass is complete, or all of
        it. True once the whole file is indexed."""
        if self.done:
            return True
        size = self._bytes.size
        stop_at = size if budget is None else min(size, self._pos + budget)
        first = self._first
        head = _HEAD.match
        start = self._pos
        for data, at, to, begin, end in self._bytes.lines(start, stop_at):
            start = end
            self.lines += 1
            match = head(data, at, min(to, at + HEAD))
            if match is not None and (data[to - 2:to] != b"}\n" and data[to - 1:to] != b"}"
                                      or match.lastindex == 1 and match.group(1) in BYTE_CODE):
                match = None  # not a whole line, or a pass event's pass not written as a number
                # (or not second): let the parser decide
            if match is None:
                if data[at:to].strip() == b"":
                    continue
                event = self._parse(begin, end)
                if first and event is None and self._bytes.cut is None \
                        and self._refused != begin:
                    raise TraceError(f"{self.path} is not a backstep trace (line 1 is not a "
                                     "JSON event; write one with `backstep trace`)")
                if event is None:
                    if self._refused != begin:  # not JSON (a malformed event is counted)
                        self._corrupt.append(self.lines)
                    continue
                kind, number = event.get("event"), event.get("pass")
            else:
                kind = match.group(1).decode()
                number = int(match.group(2)) if match.group(2) else None
            if first:
                first = False
                if kind != "session":
                    self.problems.append("no session line at the start")
            if kind in KIND_CODE and isinstance(number, int):
                if self._add(kind, number, begin, end) and self.watch is not None:
                    self.watch(kind, number, begin, end)
                if until_pass and kind == "pass_end":
                    break
            elif kind == "session":
                self.session = self._parse(begin, end)
                self._check_version()
            elif kind == "exit":
                self.exit = self._parse(begin, end)
            elif kind == "trip" and len(self.trips) < TRIPS_KEPT:
                trip = self._parse(begin, end)
                if trip is not None and isinstance(trip.get("n"), int):
                    self.trips.setdefault(trip["n"], trip)
            elif kind == "output":
                self.output_starts.append(begin)
                self.output_ends.append(end)
            elif kind in BRIEF:
                self.brief_starts.append(begin)
                self.brief_ends.append(end)
        self._pos, self._first = start, first
        self._numbers = sorted(self.passes)
        self._cut_short()
        if start < size and not self.cut:
            if self.session is None and not self.passes:
                return self.scan(budget, until_pass=until_pass)  # nothing to show yet
            return False
        self.done = True
        self._finish()
        return True

    def _cut_short(self) -> None:
        """Once the file is found shrunk while open: what was indexed stays, the rest is gone."""
        if self._bytes.cut is None or self.cut:
            return
        self.cut = True
        self.problems.append(f"the file was cut to {self._bytes.cut} bytes while open (was "
                             f"{self._bytes.size}): what was read before is kept")

    def _finish(self) -> None:
        if self.session is None and not self.passes:
            raise TraceError(f"{self.path} is not a backstep trace (no session or pass events)")
        if self._corrupt:
            lines, last, size = self._corrupt, self.lines, self._bytes.size
            if lines == [last] and self._bytes.read(size - 1, size) != b"\n":
                self.problems.append(f"the last line is cut off (line {last})")
            else:
                self.problems.append(f"{len(lines)} unreadable line(s) skipped (first: line "
                                     f"{lines[0]})")
        if self._malformed:
            first = self.rejected[min(self.rejected)]
            self.problems.append(f"{self._malformed} malformed event(s) skipped (first: {first})")
        if self._orphans:
            self.problems.append(f"{self._orphans} event(s) of passes with no pass_begin skipped")
        open_passes = [n for n, p in self.passes.items() if not p.complete]
        if open_passes:
            shown = ", ".join(str(n) for n in open_passes[:5])
            self.problems.append(f"pass {shown} did not finish (the run stopped during it)")

    def _add(self, kind: str, number: int, start: int, end: int) -> bool:
        index = self.passes.get(number)
        if kind == "pass_begin":
            if index is None:
                bisect.insort(self._numbers, number)
            index = self.passes[number] = PassIndex(number, start)  # parsed when read
        elif index is None:
            self._orphans += 1
            return False
        if kind == "pass_end":
            index.complete = True
        elif kind == "node":
            index.steps += 1
        elif kind == "edit":
            index.edits += 1
        index.last = end
        return True

    def _head(self, data: bytes, at: int, to: int, start: int,
              end: int) -> tuple[str | None, int | None]:
        """A line's ``event`` and ``pass`` (parsed only when the line is not as written)."""
        match = _HEAD.match(data, at, min(to, at + HEAD))
        if match is not None and (data[to - 2:to] == b"}\n" or data[to - 1:to] == b"}") \
                and (match.group(2) or match.group(1) not in BYTE_CODE):
            return match.group(1).decode(), int(match.group(2)) if match.group(2) else None
        event = self._parse(start, end)
        if event is None:
            return None, None
        number = event.get("pass")
        return event.get("event"), number if isinstance(number, int) else None

    def _parse(self, start: int, end: int) -> dict[str, Any] | None:
        return self._decode(self._bytes.read(start, end), start)

    def _decode(self, line: bytes | None, start: int) -> dict[str, Any] | None:
        if line is None:
            self._cut_short()
            return None
        try:
            event = json.loads(line)
            if safe_text.suspect(line):  # shown by show, diff and export: made printable once
                event = safe_text.clean(event)
        except (ValueError, RecursionError):
            return None
        if not isinstance(event, dict) or "event" not in event:
            return None
        expand(event)  # what the file left out at its default value (events.form)
        error = check(event)
        if error is None:
            return event
        self._refused = start
        if start not in self.rejected:
            where = f"{self.path}:{self.line_of(start)}: {error}"
            if self.strict:
                raise MalformedEvent(where)
            self._malformed += 1
            if len(self.rejected) < REJECTIONS_KEPT:
                self.rejected[start] = where
        return None

    def line_of(self, offset: int) -> int:
        """The line number (1-based) of the line starting at byte ``offset``, counted on from
        the last one asked for when it is further on (malformed lines are met in file order)."""
        at, lines = self._line_mark if offset >= self._line_mark[0] else (0, 1)
        while at < offset:
            chunk = self._bytes.read(at, min(offset, at + (1 << 24)))
            if not chunk:  # the file was cut under us: count what was read
                break
            lines += chunk.count(b"\n")
            at += len(chunk)
        self._line_mark = (offset, lines)
        return lines

    def _check_version(self) -> None:
        version = (self.session or {}).get("version")
        if isinstance(version, int) and version > VERSION:
            self.problems.append(f"written by a newer backstep (schema version {version}, this "
                                 f"one reads {VERSION}): showing what it understands")

    # -- reading ---------------------------------------------------------------------------

    def numbers(self) -> list[int]:
        """Pass numbers in order (so far, while a partial index is still scanning)."""
        return self._numbers

    def pass_lines(self, number: int, nodes: int | None = None) -> PassLines:
        """Where each of one pass's lines is (found again from its byte range; the last few
        passes asked for are kept). ``nodes``: at least as far as its first ``nodes`` node
        lines (the rest may not be found yet: ``complete`` says)."""
        index = self.passes[number]
        key = (index.first, index.last)
        cached = self._lines.get(number)
        if cached is not None and cached[0] == key:
            found = cached[1]
        else:
            found = PassLines(found=index.first)
            self._lines.pop(number, None)
            self._lines[number] = (key, found)
            while len(self._lines) > LINES_KEPT:
                del self._lines[next(iter(self._lines))]
        if not found.complete and (nodes is None or len(found.nodes) < nodes):
            self._find_lines(number, found, index.last, nodes)
        return found

    def _find_lines(self, number: int, found: PassLines, last: int, nodes: int | None) -> None:
        """Find more of a pass's lines: up to ``last``, or until ``nodes`` node lines are."""
        starts, ends, kinds, node_lines = found.starts, found.ends, found.kinds, found.nodes
        head, codes = _HEAD.match, BYTE_CODE
        mine = str(number).encode()
        want = -1 if nodes is None else nodes
        start = found.found
        for data, at, to, begin, end in self._bytes.lines(start, last):  # _head, inlined
            start = end
            match = head(data, at, min(to, at + HEAD))
            if match is not None and data[to - 2 : to] == b"}\n" and match.group(2):  # as written
                code = codes.get(match.group(1)) if match.group(2) == mine else None
            else:
                kind, of = self._head(data, at, to, begin, end)
                code = KIND_CODE.get(kind) if of == number and kind is not None else None
            if code is not None:
                if code == NODE_CODE:
                    node_lines.append(len(kinds))
                starts.append(begin)
                ends.append(end)
                kinds.append(code)
            if len(node_lines) == want:
                break
        self._cut_short()
        found.found = start
        found.complete = start >= last or self.cut

    def read_kinds(self, number: int, kinds: set[str]) -> list[dict[str, Any]]:
        """Only the events of these kinds of one pass (e.g. its accumulations), in order."""
        lines = self.pass_lines(number)
        codes = {KIND_CODE[k] for k in kinds if k in KIND_CODE}
        found = []
        for line, start, code in zip(self._bytes.each(lines.starts, lines.ends), lines.starts,
                                     lines.kinds, strict=True):
            if code in codes:
                event = self._decode(line, start)
                if event is not None:
                    found.append(event)
        return found

    def read(self, number: int) -> Pass:
        """Parse one pass's lines (and only those). Unreadable lines are left out."""
        lines = self.pass_lines(number)
        events: list[dict[str, Any]] = []
        end_event: dict[str, Any] | None = None
        begin: dict[str, Any] = {}
        first = self.passes[number].first
        for line, start in zip(self._bytes.each(lines.starts, lines.ends), lines.starts,
                               strict=True):
            if start == first:  # its pass_begin: too many nodes is said before any is parsed
                limits.check(self.path, number, line, len(lines.nodes),
                             self.passes[number].last - first)
            event = self._decode(line, start)
            if event is None:
                continue
            kind = event.get("event")
            if kind == "pass_begin":
                begin = event
                continue
            if kind == "pass_end":
                end_event = event
            events.append(event)
        return Pass(number, begin, events, end_event)

    def check_size(self, number: int, nodes: int | None = None) -> None:
        """``limits.PassTooBig`` if pass ``number`` has more nodes than its size allows (its
        ``pass_begin``'s and, of its node lines, the first ``nodes``: None, all of them)."""
        lines = self.pass_lines(number, nodes)
        first = self.passes[number].first
        line = self._bytes.read(first, lines.ends[0]) if len(lines.ends) else None
        limits.check(self.path, number, line, len(lines.nodes), self.passes[number].last - first)

    def event_at(self, start: int, end: int) -> dict[str, Any] | None:
        """The event on the line at these byte offsets (None when it cannot be read)."""
        return self._parse(start, end)

    def outputs_before(self, offset: int) -> int:
        """How many ``output`` events start before byte ``offset`` of the file."""
        return bisect.bisect_left(self.output_starts, offset)

    def output(self, count: int) -> list[tuple[str, str]]:
        """The first ``count`` output events as (stream, text), parsed once and kept (a trace
        records a bounded amount of output; one event of a trace made elsewhere shows at most
        its two ends: ``long_output``)."""
        texts = self._output_texts
        for i in range(len(texts), min(count, len(self.output_starts))):
            texts.append(output_entry(self._bytes.read, self._parse, self.output_starts[i],
                                      self.output_ends[i]))
        return texts[:count]

    def brief_lines(self, start: int = 0, limit: int | None = None) -> list[bytes]:
        """The raw ``leaves`` / ``history`` / ``trip`` lines indexed so far, from the
        ``start``-th on, at most ``limit`` (``traces/history_file.Reader`` decodes them); a
        line the file lost since (cut while open) is left out."""
        out = []
        end = len(self.brief_starts) if limit is None else \
            min(len(self.brief_starts), start + limit)
        for i in range(start, end):
            line = self._bytes.read(self.brief_starts[i], self.brief_ends[i])
            if line is None:
                self._cut_short()
                break
            out.append(line)
        return out

    @property
    def scanned(self) -> int:
        """How far into the file the scan has got (bytes)."""
        return self._pos

    def size(self) -> int:
        return self._bytes.size

    def note(self) -> str | None:
        """What is wrong with the file, in one line, or None when nothing is."""
        if not self.problems:
            return None
        return f"{os.path.basename(self.path)}: " + "; ".join(self.problems)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
