"""The history view (``H``): the whole run in brief, every pass a trace or a live session saw,
recorded in full or not: the loss, and a series' ‖grad‖ (every leaf combined, a module's leaves
combined, or one leaf: ``up`` / ``down``), on a log scale, with the vanishing and exploding
bands and the passes with NaN/Inf marked. A cursor over the passes (``left`` / ``right``,
``home`` / ``end``, ``pageup`` / ``pagedown``) gives that pass's numbers; ``enter`` opens it
when it is held in full. What it draws is computed in ``state/run_history``; the passes come
from the driver (``Driver.run_history``), read again while the view is up (a live session's
grow).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from backstep.traces.history_file import Column, norm_of
from backstep.tui.state.run_history import (
    FLOOR,
    VANISHING,
    HistoryTable,
    SeriesValues,
    bad_leaves,
    decades,
    held,
    leaf_max,
    loss_is_log,
    pass_ticks,
    spans,
    thin,
    verdicts,
)
from backstep.tui.text.format import cut_left, num

Y_AXIS = 12  # cells the y axis and the borders take from a plot's width
REFRESH = 0.5  # seconds between looks at a growing history (a live session)


def pass_line(table: HistoryTable, column: Column, cursor: int) -> Text:
    """The pass under the cursor: its number, loss, the series' numbers, its NaN/Inf leaves,
    and whether ``enter`` can open it. Every name from the trace is plain text."""
    if not table.rows:
        return Text("no pass in brief yet (a trace from before history, or no backward pass "
                    "so far)", style="dim italic")
    row = table.rows[cursor]
    text = Text.assemble(("← → ", "dim"), (f"pass {row.n}", "bold"),
                         (f"  ({cursor + 1}/{len(table.rows)})  ", "dim"),
                         ("loss ", "dim"), num(_shown(row.loss)),
                         ("  ‖grad‖ ", "dim"), num(_shown(norm_of(row, column))),
                         ("  max |grad| ", "dim"), num(_shown(leaf_max(row, column))))
    bad = bad_leaves(row, column)
    if bad:
        names = [table.name(n) for n in sorted(bad)]
        text.append("  NaN/Inf ", style="bold white on red")
        text.append(f" {sum(bad.values()):,} in " + ", ".join(cut_left(n, 28) for n in names[:3])
                    + (f" (+{len(names) - 3})" if len(names) > 3 else ""))
    trip = table.trips.get(row.n)
    if trip is not None:
        what = trip.get("detail") or trip.get("reason") or "a --when spec"
        at = trip.get("name")
        text.append(f"  tripped: {what}" + (f" at {at}" if at else ""), style="bold yellow")
    text.append("  · ")
    if row.n in table.full:
        text.append("held in full: enter opens it", style="green")
    else:
        text.append("held in brief only", style="dim")
    return text


def _shown(value: float | None) -> Any:
    """A number as ``num`` shows it (NaN/Inf in red, None as a dash)."""
    if value is None:
        return None
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def verdict_text(table: HistoryTable, series: SeriesValues, exploding: float) -> Text:
    """The passes outside the healthy band, for the series charted."""
    found = verdicts(series, exploding)
    text = Text()
    groups = (("NaN/Inf", found.nonfinite, "bold white on red"),
              (f"vanishing (<{VANISHING:g})", found.vanishing, "bold yellow"),
              (f"exploding (>{exploding:g})", found.exploding, "bold yellow"))
    for label, passes, style in groups:
        if passes:
            text.append(f"{label}: ", style=style)
            text.append(f"pass {spans(passes)} ({len(passes):,} pass"
                        f"{'es' if len(passes) != 1 else ''})  ")
    full = len(table.full.intersection(series.ns))
    count = len(table.rows)
    text.append(f"{count:,} pass{'es' if count != 1 else ''}, {full:,} held in full",
                style="dim")
    if table.rows and not (found.nonfinite or found.vanishing or found.exploding):
        text.append("  · every norm within the healthy band", style="green")
    return text


def _log_ticks(plt: Any, values: list[float], rows: int) -> None:
    """A log axis drawn on a linear one (the values are charted as their log10: plotext's own
    log scale takes the log again each time a plot is rebuilt): powers of ten as 1eN, one
    every other row at most (plotext moves labels that do not fit onto the wrong rows)."""
    ticks, labels = decades(values, max(2, rows // 2))
    if ticks:
        plt.yticks([math.log10(t) for t in ticks], labels)
        shown = [v for v in values if v > 0 and math.isfinite(v)]
        plt.ylim(math.log10(ticks[0]), max(math.log10(ticks[-1]), math.log10(max(shown))))


class HistoryScreen(ModalScreen[int | None]):
    """A full view over the panels; escape, q or H closes it, enter closes it on a pass to
    open (the app opens it: ``BackstepApp.open_pass``)."""

    DEFAULT_CSS = """
    #history-box { width: 100%; height: 100%; border: round $accent;
                   border-title-color: $accent; background: $surface; }
    #history-loss { height: 30%; min-height: 5; }
    #history-norms { height: 1fr; }
    #history-pass { height: auto; max-height: 2; padding: 0 1; }
    #history-verdicts { height: auto; max-height: 3; padding: 0 1; }
    """

    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("q", "dismiss", "close"),
                Binding("H", "dismiss", "close"),
                Binding("left", "move(-1)", "previous pass", show=False),
                Binding("right", "move(1)", "next pass", show=False),
                Binding("pageup", "page(-1)", "passes back", show=False),
                Binding("pagedown", "page(1)", "passes on", show=False),
                Binding("home", "move(-1_000_000_000)", "first pass", show=False),
                Binding("end", "move(1_000_000_000)", "last pass", show=False),
                Binding("up", "series(-1)", "previous series", show=False),
                Binding("down", "series(1)", "next series", show=False),
                Binding("enter", "open", "open the pass", show=False)]

    def __init__(self, source: Callable[[], HistoryTable], exploding: float = 1e3) -> None:
        super().__init__()
        self.source = source  # the driver's passes in brief, as of now
        self.exploding = exploding
        self.table = HistoryTable()
        self.cursor = 0  # the pass under the cursor (an index into the table's rows)
        self.chosen = 0  # the series charted (an index into ``table.series()``)
        self.columns: list[Column] = []
        self._cache: dict[tuple[Any, ...], tuple[HistoryTable, Any]] = {}
        self._series: dict[str | None, SeriesValues] = {}  # by column title; None: the loss

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot  # here: plotext costs ~35 ms at UI start-up

        with Vertical(id="history-box"):
            yield PlotextPlot(id="history-loss")
            yield PlotextPlot(id="history-norms")
            yield Static("", id="history-pass")
            yield Static("", id="history-verdicts")

    def on_mount(self) -> None:
        self.query_one("#history-box").border_subtitle = (
            "← → pass · ↑ ↓ series · enter opens · escape closes")
        self.refresh_table(first=True)
        self.set_interval(REFRESH, self.refresh_table)

    def on_resize(self) -> None:
        self._draw()  # the passes are thinned to the width

    def refresh_table(self, first: bool = False) -> None:
        """Look at the driver's passes again; redraw when there are more (a live session)."""
        table = self.source()
        if not first and len(table.rows) == len(self.table.rows) and table.full == \
                self.table.full and len(table.names) == len(self.table.names):
            return
        at_end = first or self.cursor >= len(self.table.rows) - 1
        self.table = table
        self.columns = table.series()
        self.chosen = min(self.chosen, len(self.columns) - 1)
        if at_end:  # the cursor follows the newest pass unless moved off it
            self.cursor = max(len(table.rows) - 1, 0)
        self.cursor = min(self.cursor, max(len(table.rows) - 1, 0))
        self._draw()

    def action_move(self, delta: int) -> None:
        if self.table.rows:
            self.cursor = min(max(self.cursor + delta, 0), len(self.table.rows) - 1)
            self._draw()

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, len(self.table.rows) // 10))

    def action_series(self, delta: int) -> None:
        if self.columns:
            self.chosen = (self.chosen + delta) % len(self.columns)
            self._draw()

    def action_open(self) -> None:
        if not self.table.rows:
            return
        n = self.table.rows[self.cursor].n
        if n not in self.table.full:
            self.notify(f"pass {n} is held in brief only: its loss and norms, not its nodes "
                        f"({held(self.table, n)})", timeout=3, markup=False)
            return
        self.dismiss(n)

    def _cached(self, what: str, make: Callable[[], Any], *key: Any) -> Any:
        """``make()`` once per table, series and width: a cursor move redraws from these
        (over 100,000 passes each costs a walk over every pass)."""
        full_key = (what, id(self.table), self.chosen, *key)
        hit = self._cache.get(full_key)
        if hit is None:
            if len(self._cache) > 16:
                self._cache.clear()
            hit = self._cache[full_key] = (self.table, make())  # the table keeps its id
        return hit[1]

    def _values(self, column: Column | None) -> SeriesValues:
        """A series' value in every pass so far (only new passes computed)."""
        key = column.title if column is not None else None
        found = self._series.get(key)
        if found is None or found.column != column:
            found = self._series[key] = SeriesValues(column)
        return found.update(self.table.rows)

    def _column(self) -> Column:
        return self.columns[self.chosen] if self.columns else Column("all", frozenset())

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        table, column = self.table, self._column()
        box = self.query_one("#history-box")
        title = Text("History · ", style="bold")
        title.append(f"{len(table.rows):,} passes · ‖grad‖ of ")
        title.append(cut_left(column.title, 40) if column.title != "all" else "every leaf")
        if len(self.columns) > 1:
            title.append(f" ({self.chosen + 1}/{len(self.columns)})")
        box.border_title = title
        self._draw_loss()
        self._draw_norms()
        self.query_one("#history-pass", Static).update(pass_line(table, column, self.cursor))
        self.query_one("#history-verdicts", Static).update(self._cached(
            "verdicts", lambda: verdict_text(table, self._values(column), self.exploding)))

    def _width(self, plot: Any) -> int:
        return max((plot.size.width or self.app.size.width) - Y_AXIS, 10)

    @staticmethod
    def _rows(plot: Any) -> int:
        """The rows a plot draws data in (less its title, frame and x axis)."""
        return max((plot.size.height or 10) - 4, 1)

    def _cursor_x(self) -> int | None:
        return self.table.rows[self.cursor].n if self.table.rows else None

    def _xlim(self, plt: Any, plot: Any) -> None:
        rows = self.table.rows
        low, high = rows[0].n, rows[-1].n
        plt.xlim(low - 0.5, high + 0.5)
        ticks = pass_ticks(low, high, max(2, self._width(plot) // 10))
        plt.xticks(ticks, [f"{t:,}" for t in ticks])

    def _draw_loss(self) -> None:
        plot: Any = self.query_one("#history-loss")
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        rows = self.table.rows
        if not any(r.loss is not None for r in rows):
            plt.title("loss: not one number in these passes")
            plot.refresh()
            return
        loss = self._values(None)
        log = self._cached("loss log", lambda: loss_is_log(loss.values))
        plt.title("loss" + (" (log scale)" if log else ""))
        width = self._width(plot)
        line = self._cached("loss", lambda: thin(loss.ns, loss.values, width, log=log), width)
        ys = [math.log10(y) for y in line.ys] if log else line.ys
        cursor = self._cursor_x()
        if cursor is not None:
            plt.vline(cursor, "gray")
        if line.xs:
            plt.scatter(line.xs, ys, marker="braille", color="green")
        if log:
            _log_ticks(plt, line.ys, self._rows(plot))
        if line.bad:
            low = min(ys) if ys else 0.0
            plt.scatter(line.bad, [low] * len(line.bad), marker="✗", color="red")
        self._xlim(plt, plot)
        plot.refresh()

    def _draw_norms(self) -> None:
        plot: Any = self.query_one("#history-norms")
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        rows, column = self.table.rows, self._column()
        plt.title("‖grad‖ per pass (log scale)")
        if not rows:
            plot.refresh()
            return
        width = self._width(plot)

        def marks() -> tuple[Any, list[int]]:
            series = self._values(column)
            line = thin(series.ns, series.values, width)
            bad = [n for n, wrong in zip(series.ns, series.bad, strict=True) if wrong]
            if len(bad) > 2 * width:  # one mark a cell is enough
                bad = bad[::math.ceil(len(bad) / width)]
            return line, bad

        line, bad = self._cached("norms", marks, width)
        cursor = self._cursor_x()
        if cursor is not None:
            plt.vline(cursor, "gray")
        if line.xs:
            plt.scatter(line.xs, [math.log10(y) for y in line.ys], marker="braille", color="cyan")
        if bad:
            plt.scatter(bad, [math.log10(FLOOR)] * len(bad), marker="✗", color="red")
        plt.hline(math.log10(VANISHING), "yellow")
        plt.hline(math.log10(self.exploding), "red")
        _log_ticks(plt, [*line.ys, VANISHING, self.exploding, *([FLOOR] if bad else [])],
                   self._rows(plot))
        plt.xlabel("pass")
        self._xlim(plt, plot)
        plot.refresh()
