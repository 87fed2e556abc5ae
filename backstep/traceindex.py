"""An index of a ``backstep trace`` file: where each pass's lines are, so one pass reads alone.

A trace can be gigabytes (many iterations of a large model). ``show``, ``diff`` and ``export``
read it one pass at a time: opening scans the file once for line boundaries and the ``event`` and
``pass`` keys at the start of each line (the recorder always writes them first), never parsing
the gradient summaries; reading a pass seeks to its lines and parses only those. Passes of
several threads are interleaved in the file, so each pass keeps its own list of line offsets.

A damaged trace (a killed run, a half-written last line, corrupt lines, a newer schema version)
opens with what is valid; ``problems`` says what is not, and ``note()`` says it in one line. A
file that is not a trace at all raises ``TraceError``. Stdlib only: it works where torch is not
installed.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from array import array
from dataclasses import dataclass, field
from typing import Any

from backstep.protocol import VERSION

# A line's opening as the recorder writes it: {"event":"node","pass":3,...
_HEAD = re.compile(rb'\{"event": ?"([A-Za-z_]+)"(?:, ?"pass": ?(\d+))?')
_LINE = re.compile(rb"[^\n]*\n|[^\n]+\Z")


class TraceError(Exception):
    """The file cannot be read as a trace at all (the CLI prints it and exits with code 2)."""


@dataclass
class PassIndex:
    """Where one pass's events are in the file, and what its ``pass_begin`` line says."""

    number: int
    begin: dict[str, Any] | None = None
    starts: array = field(default_factory=lambda: array("q"))
    ends: array = field(default_factory=lambda: array("q"))
    complete: bool = False
    steps: int = 0

    @property
    def parent(self) -> int | None:
        return (self.begin or {}).get("parent")

    @property
    def thread(self) -> str | None:
        return (self.begin or {}).get("thread")


@dataclass
class Pass:
    """One pass read from the file: its ``pass_begin`` and the events that followed, in order."""

    number: int
    begin: dict[str, Any]
    events: list[dict[str, Any]]
    end: dict[str, Any] | None

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return list(self.begin.get("nodes") or [])

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The ``node`` events, in execution order."""
        return [e for e in self.events if e.get("event") == "node"]


class TraceIndex:
    """A trace file opened for reading by pass. Keep it open while reading; ``close()`` after."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.session: dict[str, Any] | None = None
        self.exit: dict[str, Any] | None = None
        self.passes: dict[int, PassIndex] = {}
        self.problems: list[str] = []
        self.lines = 0
        self._corrupt: list[int] = []
        self._orphans = 0
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise TraceError(f"cannot open {self.path}: {exc.strerror or exc}") from None
        try:
            size = os.fstat(self._file.fileno()).st_size
            if size == 0:
                raise TraceError(f"{self.path} is empty: no events were recorded")
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self._scan()
        except BaseException:
            self._file.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _scan(self) -> None:
        data = self._map
        first = True
        head = _HEAD.match
        for line in _LINE.finditer(data):
            start, end = line.span()
            self.lines += 1
            match = head(data, start, min(end, start + 64))
            if match is not None and data[end - 2:end] != b"}\n" and data[end - 1:end] != b"}":
                match = None  # not a whole line: let the parser decide
            if match is None:
                if data[start:end].strip() == b"":
                    continue
                event = self._parse(start, end)
                if first and event is None:
                    raise TraceError(f"{self.path} is not a backstep trace (line 1 is not a "
                                     "JSON event; write one with `backstep trace`)")
                if event is None:
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
            if kind == "session":
                self.session = self._parse(start, end)
                self._check_version()
            elif kind == "exit":
                self.exit = self._parse(start, end)
            elif kind in ("pass_begin", "node", "accumulate", "pass_end", "diagnosis",
                          "graph_released") and isinstance(number, int):
                self._add(kind, number, start, end)
        if self.session is None and not self.passes:
            raise TraceError(f"{self.path} is not a backstep trace (no session or pass events)")
        if self._corrupt:
            lines = self._corrupt
            last = self.lines
            if lines == [last] and not data[-1:] == b"\n":
                self.problems.append(f"the last line is cut off (line {last})")
            else:
                self.problems.append(f"{len(lines)} unreadable line(s) skipped (first: line "
                                     f"{lines[0]})")
        if self._orphans:
            self.problems.append(f"{self._orphans} event(s) of passes with no pass_begin skipped")
        open_passes = [n for n, p in self.passes.items() if not p.complete]
        if open_passes:
            shown = ", ".join(str(n) for n in open_passes[:5])
            self.problems.append(f"pass {shown} did not finish (the run stopped during it)")

    def _add(self, kind: str, number: int, start: int, end: int) -> None:
        index = self.passes.get(number)
        if kind == "pass_begin":
            begin = self._parse(start, end)
            if begin is None:
                self._corrupt.append(self.lines)
                return
            index = self.passes[number] = PassIndex(number, begin)
        elif index is None:
            self._orphans += 1
            return
        if kind == "pass_end":
            index.complete = True
        elif kind == "node":
            index.steps += 1
        index.starts.append(start)
        index.ends.append(end)

    def _parse(self, start: int, end: int) -> dict[str, Any] | None:
        try:
            event = json.loads(self._map[start:end])
        except (ValueError, RecursionError):
            return None
        return event if isinstance(event, dict) and "event" in event else None

    def _check_version(self) -> None:
        version = (self.session or {}).get("version")
        if isinstance(version, int) and version > VERSION:
            self.problems.append(f"written by a newer backstep (schema version {version}, this "
                                 f"one reads {VERSION}): showing what it understands")

    # -- reading ---------------------------------------------------------------------------

    def numbers(self) -> list[int]:
        """Pass numbers in order."""
        return sorted(self.passes)

    def read(self, number: int) -> Pass:
        """Parse one pass's lines (and only those). Unreadable lines are left out."""
        index = self.passes[number]
        events: list[dict[str, Any]] = []
        end_event: dict[str, Any] | None = None
        for start, end in zip(index.starts, index.ends, strict=True):
            event = self._parse(start, end)
            if event is None:
                continue
            kind = event.get("event")
            if kind == "pass_begin":
                continue
            if kind == "pass_end":
                end_event = event
            events.append(event)
        return Pass(number, index.begin or {}, events, end_event)

    def note(self) -> str | None:
        """What is wrong with the file, in one line, or None when nothing is."""
        if not self.problems:
            return None
        return f"{os.path.basename(self.path)}: " + "; ".join(self.problems)

    def close(self) -> None:
        self._map.close()
        self._file.close()

    def __enter__(self) -> TraceIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
