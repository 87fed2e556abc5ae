"""What the history view (``H``) draws, without drawing it: every pass in brief (the loss, each
leaf's or module's ‖grad‖, the NaN/Inf count) as ``traces/history_file`` decodes the
``leaves`` / ``history`` / ``trip`` events, the series to chart, thinned to the chart's width,
and the words under it.

A live session's events arrive on the reader thread (``RunHistory.add``); a trace's lines are
read from its index (``RunHistory.add_lines``). The view only ever sees a ``HistoryTable``: an
immutable snapshot of the passes so far. Plain Python, no textual.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from backstep.safe_text import printable
from backstep.traces.history_file import Column, History, Reader, Row, norm_of

VANISHING = 1e-7  # as the gradient-flow chart's (``flow_leaves``)
FLOOR = 1e-12  # zeros are drawn here on the log scale


@dataclass(frozen=True)
class HistoryTable:
    """The passes in brief so far, and which of them are held in full (``enter`` opens one)."""

    names: tuple[str, ...] = ()  # leaf number -> its name, made printable
    modules: tuple[str | None, ...] = ()
    rows: tuple[Row, ...] = ()  # in pass order
    trips: Mapping[int, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    full: frozenset[int] = frozenset()

    def series(self) -> list[Column]:
        """What can be charted: every leaf combined ("all"), then each module (its leaves'
        norms combined), then each leaf; ``up`` / ``down`` choose one."""
        out = [Column("all", frozenset(range(len(self.names))))]
        modules: dict[str, set[int]] = {}
        for n, module in enumerate(self.modules):
            if module is not None:
                modules.setdefault(module, set()).add(n)
        out += [Column(m, frozenset(ids)) for m, ids in modules.items()]
        if len(self.names) > 1 or modules:
            out += [Column(name, frozenset({n})) for n, name in enumerate(self.names)]
        return out

    def name(self, leaf: int) -> str:
        return self.names[leaf] if 0 <= leaf < len(self.names) else f"leaf {leaf}"


class RunHistory:
    """The run in brief as it grows: fed from one thread, read (``table``) from another."""

    def __init__(self) -> None:
        self._history = History()
        self._reader = Reader(self._history)
        self._lock = threading.Lock()
        self.lines_read = 0  # a trace's brief lines taken so far (``add_lines``)
        self._table: tuple[tuple[int, ...], HistoryTable] | None = None  # the last made

    def add(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._reader.event(event)

    def add_lines(self, lines: Iterable[bytes]) -> None:
        with self._lock:
            for line in lines:
                self.lines_read += 1
                self._reader.line(line)

    def __len__(self) -> int:
        return len(self._history.rows)

    def table(self, full: Iterable[int] = ()) -> HistoryTable:
        """The passes so far, as an immutable table (made again only when they changed)."""
        full = frozenset(full)
        with self._lock:
            h = self._history
            key = (len(h.rows), len(h.names), len(h.trips), hash(full))
            if self._table is not None and self._table[0] == key:
                return self._table[1]
            rows = sorted(h.rows, key=lambda r: r.n) if _unsorted(h.rows) else h.rows
            table = HistoryTable(tuple(printable(n) for n in h.names),
                                 tuple(printable(m) if m is not None else None
                                       for m in h.modules),
                                 tuple(rows), MappingProxyType(dict(h.trips)), full)
            self._table = (key, table)
            return table


def _unsorted(rows: list[Row]) -> bool:
    return any(rows[k].n > rows[k + 1].n for k in range(len(rows) - 1))


# -- what one pass says ---------------------------------------------------------------------

def leaf_max(row: Row, column: Column) -> float | None:
    """The column's max |grad| in ``row`` (None: none of its leaves had a gradient)."""
    values = [row.maxes[p] for p, n in enumerate(row.ids) if n in column.leaves]
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


def bad_leaves(row: Row, column: Column) -> dict[int, int]:
    """The column's leaves with NaN/Inf values in ``row``: leaf -> how many."""
    return {n: c for n, c in row.nonfinite.items() if n in column.leaves}


def nonfinite(value: float | None) -> bool:
    return value is not None and not math.isfinite(value)


# -- the chart -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """One series thinned to the chart's width: an envelope (each bin's least and greatest
    value, in pass order), and the passes where it is not finite (one per bin)."""

    xs: list[int]
    ys: list[float]
    bad: list[int]


def thin(ns: Sequence[int], values: Sequence[float | None], width: int,
         log: bool = True) -> Line:
    """``values`` (a float or None a pass) over the passes ``ns``, at most two points per cell
    of ``width``: each bin's least and greatest, so a spike or a dip never thins away. On a
    log scale a value <= 0 is drawn at the floor."""
    xs: list[int] = []
    ys: list[float] = []
    bad: list[int] = []
    size = max(1, math.ceil(len(ns) / max(width, 1)))
    for start in range(0, len(ns), size):
        low: tuple[float, int] | None = None
        high: tuple[float, int] | None = None
        bad_here = None
        for n, v in zip(ns[start:start + size], values[start:start + size], strict=True):
            if v is None:
                continue
            if not math.isfinite(v):
                if bad_here is None:
                    bad_here = n
                continue
            if log and v <= 0:
                v = FLOOR
            if low is None or v < low[0]:
                low = (v, n)
            if high is None or v > high[0]:
                high = (v, n)
        if bad_here is not None:
            bad.append(bad_here)
        points = sorted({low, high} - {None}, key=lambda p: p[1])  # type: ignore[arg-type]
        for v, n in points:
            xs.append(n)
            ys.append(v)
    return Line(xs, ys, bad)


class SeriesValues:
    """One series' value in every pass (a column's ‖grad‖ and whether any of its leaves had
    NaN/Inf; with no column, the loss), kept as the passes grow: a live session's table gains
    a pass at a time and only the new ones are computed."""

    def __init__(self, column: Column | None) -> None:
        self.column = column
        self.ns: list[int] = []
        self.values: list[float | None] = []
        self.bad: list[bool] = []
        self._last: Row | None = None

    def update(self, rows: Sequence[Row]) -> SeriesValues:
        k = len(self.values)
        if k > len(rows) or (k and rows[k - 1] is not self._last):  # not the same passes
            self.ns, self.values, self.bad, k = [], [], [], 0
        column = self.column
        for row in rows[k:]:
            self.ns.append(row.n)
            if column is None:
                self.values.append(row.loss)
                self.bad.append(nonfinite(row.loss))
            else:
                norm = norm_of(row, column)
                self.values.append(norm)
                self.bad.append(nonfinite(norm) or bool(bad_leaves(row, column)))
        self._last = rows[-1] if rows else None
        return self


def decades(values: Iterable[float], most: int = 9) -> tuple[list[float], list[str]]:
    """The y ticks of a log axis over ``values`` (positive): powers of ten, at most ``most``
    of them (a short chart: every second or third decade, each labelled as what it is)."""
    shown = [v for v in values if v > 0 and math.isfinite(v)]
    if not shown:
        return [], []
    low, high = math.floor(math.log10(min(shown))), math.ceil(math.log10(max(shown)))
    high = max(high, low + 1)
    step = max(1, math.ceil((high - low) / max(most - 1, 1)))
    ticks = [10.0**e for e in range(low, high + 1, step)]
    return ticks, [f"1e{round(math.log10(t))}" for t in ticks]


def pass_ticks(low: int, high: int, most: int) -> list[int]:
    """Round pass numbers for the x axis between ``low`` and ``high``, at most ``most``: a
    step of 1, 2 or 5 times a power of ten, the first and last pass among them when there
    is room."""
    span = max(high - low, 1)
    step = 1
    for power in range(0, 12):
        for k in (1, 2, 5):
            step = k * 10**power
            if span / step < max(most - 1, 1):
                break
        else:
            continue
        break
    ticks = list(range(math.ceil(low / step) * step, high + 1, step))
    if not ticks or ticks[0] - low > step / 2:
        ticks.insert(0, low)
    return [t for t in ticks if low <= t <= high]


def loss_is_log(losses: Sequence[float | None]) -> bool:
    """The loss axis is logarithmic when every finite loss is above 0 (else linear)."""
    shown = [v for v in losses if v is not None and math.isfinite(v)]
    return bool(shown) and min(shown) > 0


# -- the words -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdicts:
    """The passes outside the healthy band for one series, each group's first and count."""

    nonfinite: list[int]
    vanishing: list[int]
    exploding: list[int]


def verdicts(series: SeriesValues, exploding: float) -> Verdicts:
    bad: list[int] = []
    low: list[int] = []
    high: list[int] = []
    for n, norm, wrong in zip(series.ns, series.values, series.bad, strict=True):
        if wrong:
            bad.append(n)
        elif norm is not None and norm < VANISHING:
            low.append(n)
        elif norm is not None and norm > exploding:
            high.append(n)
    return Verdicts(bad, low, high)


def spans(passes: list[int], most: int = 3) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"`` (the first ``most`` runs, then how many more)."""
    runs: list[tuple[int, int]] = []
    for n in passes:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    words = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most]]
    if len(runs) > most:
        words.append(f"+{len(runs) - most} more")
    return ", ".join(words)


def held(table: HistoryTable, n: int) -> str:
    """How pass ``n`` is held: in full (``enter`` opens it) or in brief only."""
    return "in full" if n in table.full else "in brief"
