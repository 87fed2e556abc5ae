"""The leaves panel: each leaf's .grad before this pass and now, and gradient flow per parameter.

Only the rows in view are made and drawn (``RowList``), so a model with thousands of parameters
costs the same to show as one with three; each row ends in a bar of its gradient norm (log scale
when the norms span more than two decades): the gradient-flow picture people otherwise draw by
hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import accumulate

from rich.text import Text

from backstep.tui.state.records import Accumulation, Summary, number
from backstep.tui.state.snapshot import Snapshot
from backstep.tui.text.format import cut_left, fit_num
from backstep.tui.widgets.rowlist import RowList
from backstep.tui.widgets.titles import set_title

BAR = 10
# (label, width, right-aligned): the widths at 140x42; ``column_widths`` fits them to the panel
# a number column keeps a cell of space before its number, which loses digits to fit
COLUMNS = (("leaf", 15, False), ("before", 9, True), ("now", 9, True), ("change", 10, True),
           ("n", 3, True), ("‖grad‖", BAR + 1, False))
NAME_MIN = 12  # "…ln_2.weight": below this, "n" goes too; below 8 the table scrolls sideways
NAME_WANT = 24  # a name this long has room before the bar grows to its full length
RETAINED = " (retain_grad)"


def column_widths(room: int) -> tuple[int, ...]:
    """The columns' widths in ``room`` cells. The numbers keep their full width; the bar
    narrows, then goes (F draws the same picture, and "now" has the norm), then "before" goes
    ("change" says it), then "n"; the name takes the rest."""
    name, before, now, change, passes, _ = (w for _, w, _ in COLUMNS)
    fixed = before + now + change + passes
    if room >= fixed + BAR + 1 + NAME_WANT:
        bar = BAR + 1
    elif room >= fixed + len("NaN/Inf") + 1 + 14:
        bar = len("NaN/Inf") + 1
    else:
        bar = 0
    if not bar and room < fixed + NAME_MIN:
        before = 0
    if not before and room < now + change + passes + NAME_MIN:
        passes = 0
    name = max(8, room - before - now - change - passes - bar)
    return (name, before, now, change, passes, bar)


def name_label(name: str, retained: bool, width: int) -> Text:
    """A leaf's name in ``width`` cells, cut from the left only (the tail says which parameter);
    " (retain_grad)" follows when the name keeps 8 cells beside it."""
    if retained and width - len(RETAINED) >= min(len(name), 8):
        return (Text(cut_left(name, width - len(RETAINED)), style="green")
                .append(RETAINED, style="dim"))
    return Text(cut_left(name, width), style="green")


def cell(value: Text | str, width: int, right: bool) -> Text:
    """A cell's text in ``width`` cells, a space before it (right-aligned, it keeps one to its
    left: numbers never run together)."""
    text = value if isinstance(value, Text) else Text(value)
    if right:
        text.truncate(max(width - 1, 0), overflow="ellipsis")
        text.pad_left(width - text.cell_len)
    else:
        text = Text(" ").append_text(text)
        text.truncate(width, overflow="ellipsis")
    return text


def joined(cells: Iterable[Text], widths: Iterable[int]) -> Text:
    """A row's cells as one text, each filled out to its column's width with plain spaces (as
    DataTable filled a column): a row is drawn in one go, not a cell at a time."""
    row = Text()
    for part, width in zip(cells, widths, strict=True):
        if width <= 0:  # a column given up for room (a cell cut to nothing still holds "…")
            continue
        row.append_text(part if part.cell_len <= width else part[:width])
        if part.cell_len < width:
            row.append(" " * (width - part.cell_len))
    return row


def grad_text(summary: Summary | None, pending: bool = False, width: int = 8) -> Text:
    """A scalar's value, or a tensor's norm, in ``width`` cells."""
    if summary is None:
        return Text("pending" if pending else "None", style="dim")
    values = summary.get("values")
    if isinstance(values, list) and len(values) == 1:
        return fit_num(values[0], width)
    return Text("‖").append_text(fit_num(summary.get("norm"), width - 2)).append("‖")


def change_text(acc: Accumulation, width: int = 9) -> Text:
    after, before = acc.after, acc.before
    if after is None:
        return Text("")
    a_vals = after.get("values")
    b_vals = before.get("values") if before is not None else None
    if isinstance(a_vals, list) and len(a_vals) == 1:
        b = number(b_vals[0]) if isinstance(b_vals, list) and len(b_vals) == 1 else 0.0
        a = number(a_vals[0])
        if a is not None and b is not None:
            return Text(fit_num(a - b, width, sign=True).plain, style="yellow")
    a_norm = number(after.get("norm"))
    b_norm = number(before.get("norm")) if before is not None else 0.0
    if a_norm is None or b_norm is None:
        return Text("?", style="red")
    change = fit_num(a_norm - b_norm, width - 2, sign=True).plain
    return Text(f"‖{change}‖", style="yellow")


class Scale:
    """Maps a norm to a bar length, linear or log depending on the spread of the norms."""

    def __init__(self, norms: Mapping[str, float]) -> None:
        finite = [v for v in norms.values() if math.isfinite(v) and v > 0]
        self.top = max(finite, default=1.0)
        self.low = min(finite, default=1.0)
        self.log = bool(finite) and self.top / self.low > 100

    def bar(self, value: float | None, length: int = BAR) -> Text:
        if value is None or length <= 0:
            return Text("")
        if not math.isfinite(value):
            return Text("NaN/Inf", style="bold white on red")
        if value <= 0:
            frac = 0.0
        elif self.log:
            span = math.log10(self.top) - math.log10(self.low)
            frac = 0.05 + 0.95 * (math.log10(value) - math.log10(self.low)) / span if span else 1.0
        else:
            frac = value / self.top
        cells = max(0.0, min(1.0, frac)) * length
        full = int(cells)
        part = " ▏▎▍▌▋▊▉"[int((cells - full) * 8)] if full < length else ""
        return Text("█" * full + part.strip(), style="magenta")


class LeavesPanel(RowList):
    """One row per leaf the pass reaches: before, now, change, passes since zeroed, norm bar.

    Passes of a training loop reach the same leaves, so the rows stay when the pass changes;
    a row is made again only when it is drawn and what it shows changed (a pass change that
    moved every leaf's norm made all 500 rows of a large model again, 50 ms, for the 16 on
    screen). The columns fit the panel's width (``column_widths``)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.border_title = "Leaves (.grad)"
        self._key: tuple[int, int, int, int] | None = None
        self._graph: object = None  # the graph ``_names`` were read from
        self._names: list[str] = []  # the graph's leaves, in graph order
        self._known: frozenset[str] = frozenset()
        self._rows: list[str] = []  # the rows shown, by leaf name
        self._inputs: list[object] = []  # what each row's text was made from
        self._wanted: list[object] = []  # what each row's text is to be made from
        self._row_source: tuple[Snapshot, dict[str, Accumulation], Scale] | None = None
        self._widths: tuple[int, ...] = tuple(w for _, w, _ in COLUMNS)

    def on_mount(self) -> None:
        self.set_header(self._header_text())

    def _header_text(self) -> Text:
        return joined((cell(label, width, right)
                       for (label, _, right), width in zip(COLUMNS, self._widths, strict=True)),
                      self._widths)

    def on_resize(self) -> None:
        self.fit(self.scrollable_content_region.width)

    def watch_show_vertical_scrollbar(self) -> None:
        """Leaves that come after the first frame bring a vertical scrollbar and no resize:
        fitted again beside it (a column was cut, a horizontal scrollbar drawn)."""
        self.call_after_refresh(lambda: self.fit(self.scrollable_content_region.width))

    def fit(self, room: int) -> None:
        """Fit the columns to ``room`` cells; on a change, every row is made again (names
        re-cut)."""
        widths = column_widths(room)
        if widths == self._widths or room <= 0:
            return
        self._widths = widths
        self.set_header(self._header_text())
        self._inputs = [None] * len(self._inputs)
        self.forget()

    def _graph_leaves(self, snapshot: Snapshot) -> list[str]:
        view = snapshot.pass_
        assert view is not None
        if view.graph is not self._graph:
            self._graph = view.graph
            names: dict[str, None] = {}
            for info in view.graph.nodes.values():
                if info.leaf:
                    names.setdefault(info.leaf)
            self._names = list(names)
            self._known = frozenset(names)
        return self._names

    def show(self, snapshot: Snapshot) -> None:
        view = snapshot.pass_
        key = (view.number, view.accumulated, len(view.graph.nodes),
               id(snapshot.leaf_norms)) if view is not None else None
        if key == self._key and key is not None:
            return
        self._key = key
        if view is None:
            self._reset([])
            set_title(self, "Leaves (.grad)")
            return
        accs = {a.leaf: a for a in view.accumulations()}
        names = self._graph_leaves(snapshot)
        extra = [n for n in accs if n not in self._known]
        if extra:  # accumulated without a node in the graph (kept as the old panel did)
            names = names + extra
        norms = snapshot.leaf_norms
        scale = Scale({n: norms[n] for n in names if n in norms})
        where = (scale.top, scale.low, scale.log)
        inputs: list[object] = []
        for name in names:
            acc = accs.get(name)
            if acc is None:  # pending: its row reads so, whatever the norms
                inputs.append("pending")
            else:
                inputs.append((acc.before, acc.after, acc.retained, acc.passes_since_zeroed,
                               where))
        self._row_source = (snapshot, accs, scale)
        if names != self._rows:
            self._reset(names)
        self._wanted = inputs
        for i in self.rows_in_view():  # those whose numbers moved; the rest when scrolled to
            if inputs[i] != self._inputs[i]:
                self.refresh_row(i)
        log = " · log scale" if scale.log else ""
        if any(isinstance(a.after, Mapping) and "shard" in a.after for a in accs.values()):
            log += " · local shards"  # FSDP/DTensor: this rank's, never a global statistic
        set_title(self, f"Leaves (.grad) · {len(accs)}/{len(names)} accumulated{log}")

    def text_of(self, index: int) -> Text:
        """Row ``index``'s text, made again first if what it shows changed."""
        if self._wanted[index] != self._inputs[index]:
            self._inputs[index] = self._wanted[index]
            self._texts.pop(index, None)
        return super().text_of(index)

    def row_text(self, index: int) -> Text:
        assert self._row_source is not None
        snapshot, accs, scale = self._row_source
        name = self._rows[index]
        return joined(self._cells(name, accs.get(name), snapshot, scale), self._widths)

    def row_cells(self, index: int) -> list[Text]:
        """Row ``index``'s cells as they read when drawn."""
        ends = list(accumulate(self._widths))
        return list(self.text_of(index).divide(ends[:-1]))

    def _reset(self, names: list[str]) -> None:
        self._rows = list(names)
        self._inputs = [None] * len(names)
        self._wanted = [None] * len(names)
        self.set_rows(len(names))

    def _cells(self, name: str, acc: Accumulation | None, snapshot: Snapshot,
               scale: Scale) -> tuple[Text, ...]:
        widths = self._widths
        label = name_label(name, acc is not None and acc.retained, widths[0] - 1)  # cell pads 1
        bar = widths[-1] - 1
        if acc is None:  # no gradient yet this pass: "pending", and no bar (the norm of an
            # earlier pass, drawn beside an empty "before", read as this pass's gradient)
            row: tuple[Text | str, ...] = (label, "", grad_text(None, pending=True), "", "", "")
        else:
            norm = number(acc.after.get("norm")) if acc.after is not None else None
            row = (label, grad_text(acc.before, width=widths[1] - 1),
                   grad_text(acc.after, width=widths[2] - 1), change_text(acc, widths[3] - 1),
                   str(acc.passes_since_zeroed), scale.bar(norm, bar))
        return tuple(cell(v, w, r) for v, w, (_, _, r) in zip(row, widths, COLUMNS, strict=True))
