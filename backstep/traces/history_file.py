"""A trace's history read back: the ``leaves``, ``history`` and ``trip`` lines
(``engine/history``, ``engine/planned`` write them), and the columns ``backstep history`` shows:
a leaf, or a module (its leaves' norms combined: the square root of the sum of their squares).
The same ``Reader`` folds a live session's events as they arrive (the UI's ``H``).

Only those kinds of line are parsed; every other line is skipped by its first bytes, so a
100,000-pass history reads in seconds. Stdlib only.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import math
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

_HISTORY = b'"history"'  # looked for in a line's first bytes: no other line is parsed
_LEAVES = b'"leaves"'
_TRIP = b'"trip"'
_HEAD = 24
_NUMBERS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class HistoryError(ValueError):
    """The file is not a trace with history (its one line)."""


def decode_floats(text: str) -> array:
    """A history event's float array (base64 of little-endian float32)."""
    values = array("f")
    values.frombytes(base64.b64decode(text, validate=True))
    if sys.byteorder != "little":
        values.byteswap()
    return values


def parse_ranges(text: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]``."""
    out: list[int] = []
    for part in text.split(",") if text else ():
        start, sep, end = part.partition("-")
        if sep:
            out.extend(range(int(start), int(end) + 1))
        else:
            out.append(int(start))
    return out


@dataclass
class Row:
    """One pass in brief."""

    n: int
    loss: float | None
    ids: list[int]
    norms: array
    maxes: array
    nonfinite: dict[int, int] = field(default_factory=dict)  # leaf number -> NaN/Inf values

    @property
    def bad(self) -> int:
        return sum(self.nonfinite.values())


@dataclass
class History:
    names: list[str] = field(default_factory=list)
    modules: list[str | None] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    lines: int = 0
    trips: dict[int, dict[str, Any]] = field(default_factory=dict)  # pass -> its trip event


def _number(value: object) -> float | None:
    if isinstance(value, str):
        return _NUMBERS.get(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def read_lines(stream: IO[bytes], path: str) -> Iterator[bytes]:
    first = True
    for line in stream:
        if first:
            first = False
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if not isinstance(event, dict) or "event" not in event:
                raise HistoryError(f"{path} is not a backstep trace (line 1 is not a JSON event)")
        yield line


def read(stream: IO[bytes], path: str) -> History:
    """Every history line of the trace in ``stream``; HistoryError when it is not a trace.
    A malformed history line is skipped (counted in ``lines`` all the same)."""
    out = History()
    reader = Reader(out)
    for line in read_lines(stream, path):
        out.lines += 1
        reader.line(line)
    return out


class Reader:
    """Folds ``leaves``, ``history`` and ``trip`` events into a ``History``: from a trace's
    lines (``line``: any other line is skipped by its first bytes) or as events arrive
    (``event``: a live session's). A malformed event is skipped."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._known: dict[str, list[int]] = {}  # ids text -> numbers: most passes repeat the last's

    def line(self, line: bytes) -> None:
        head = line[:_HEAD]
        if _HISTORY in head or _LEAVES in head or _TRIP in head:
            try:
                event = json.loads(line)
            except ValueError:
                return
            if isinstance(event, dict):
                self.event(event)

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        try:
            if kind == "history":
                self._history(event)
            elif kind == "leaves":
                self._leaves(event)
            elif kind == "trip":
                n = event["n"]
                if type(n) is int:
                    self.history.trips[n] = event
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return

    def _history(self, event: dict[str, Any]) -> None:
        known = self._known
        text = event.get("ids") or ""
        ids = known.get(text)
        if ids is None:
            if len(known) > 64:
                known.clear()
            ids = known[text] = parse_ranges(text)
        norms = decode_floats(event.get("norm") or "")
        maxes = decode_floats(event.get("max") or "")
        if len(norms) != len(ids) or len(maxes) != len(ids):
            return
        bad = {ids[p]: int(c) for p, c in event.get("nonfinite") or ()}
        self.history.rows.append(Row(int(event["n"]), _number(event.get("loss")), ids, norms,
                                     maxes, bad))

    def _leaves(self, event: dict[str, Any]) -> None:
        out = self.history
        first, names = int(event["first"]), [str(n) for n in event["names"]]
        modules = event.get("modules") or [None] * len(names)
        if first < 0:
            return
        while len(out.names) < first + len(names):
            out.names.append(f"leaf {len(out.names)}")
            out.modules.append(None)
        for k, name in enumerate(names):
            out.names[first + k] = name
            module = modules[k] if k < len(modules) else None
            out.modules[first + k] = module if isinstance(module, str) else None


@dataclass
class Column:
    title: str
    leaves: frozenset[int]


def columns(history: History, leaf_globs: list[str], module_globs: list[str]) -> list[Column]:
    """The columns asked for: each leaf a ``--leaf`` glob matches, each module a ``--module``
    glob matches (its leaves combined); none asked for: one column of every leaf combined."""
    out: list[Column] = []
    for pattern in leaf_globs:
        for n, name in enumerate(history.names):
            if fnmatch.fnmatchcase(name, pattern) and not any(c.title == name for c in out):
                out.append(Column(name, frozenset({n})))
    modules: dict[str, set[int]] = {}
    for n, module in enumerate(history.modules):
        if module is None:
            continue
        for pattern in module_globs:
            if fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*"):
                modules.setdefault(module, set()).add(n)
                break
    out.extend(Column(m, frozenset(ids)) for m, ids in modules.items())
    if not leaf_globs and not module_globs:
        out.append(Column("all", frozenset(range(len(history.names)))))
    return out


def norm_of(row: Row, column: Column) -> float | None:
    """The column's gradient norm in ``row`` (None: none of its leaves had a gradient): the
    square root of the sum of its leaves' squared norms, NaN if one is NaN."""
    key = (id(row.ids), column.title)
    positions = _POSITIONS.get(key)
    if positions is None or positions[0] is not row.ids:
        if len(_POSITIONS) > 4096:
            _POSITIONS.clear()
        leaves = column.leaves
        positions = _POSITIONS[key] = (row.ids, [p for p, n in enumerate(row.ids) if n in leaves])
    if not positions[1]:
        return None
    norms = row.norms
    values = [norms[p] for p in positions[1]] if len(positions[1]) != len(norms) else norms
    total = math.hypot(*values)
    if math.isinf(total) and any(map(math.isnan, values)):
        return math.nan
    return total


# (id of a row's ids list, column) -> (that list, the column's positions in it); rows that share
# their leaves share one ids list (``read``), so a column's positions are found once
_POSITIONS: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
