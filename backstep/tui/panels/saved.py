"""The saved-tensors panel: what the node kept from the forward pass, and the pass's totals."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rich._ratio import ratio_distribute  # how an expanded Table shares out spare cells
from rich.text import Text
from textual.geometry import Size
from textual.widgets import Static

from backstep.tui.state.focus import Focus
from backstep.tui.state.memory_table import SavedCost, held_now, saved_costs
from backstep.tui.state.records import SavedInfo
from backstep.tui.text.format import apart_width, cut_apart, cut_middle, nbytes, shape_text

STATUS_STYLE = {"alive": "green", "freed": "dim", "modified": "bold red", "unknown": "yellow"}
# under the table when the engine could not read a saved tensor (status "unknown"): the traced
# torch has no SavedTensor.data, and unpacking would re-run checkpoint forwards
UNKNOWN_LINE = ("torch < 2.10 has no SavedTensor.data: saved tensors' shapes, sizes and status "
                "are unknown")


def status_text(item: SavedInfo, released: bool = False) -> Text:
    """The status; ``released`` when the node has run in a pass that does not retain the graph
    (the engine reports the status as seen before the node ran, and PyTorch frees right after)."""
    if released and item.status == "alive" and item.shape is not None:
        return Text("freed", style="dim")
    if item.status == "none" or (item.status == "scalar" and item.value is not None):
        return Text("")  # a value, not a tensor held: the tensor column says it all
    text = Text(item.status, style=STATUS_STYLE.get(item.status, ""))
    if item.version_saved is not None and item.version_now is not None and (
        item.status == "modified" or item.version_now != item.version_saved
    ):
        text.append(f" v{item.version_saved}→v{item.version_now}", style="red")
    return text


def tensor_cell(item: SavedInfo, dtype: bool) -> str:
    """The tensor column: shape (and dtype), a scalar's value, or None for an optional tensor
    PyTorch did not save."""
    if item.status == "none":
        return "None"
    if item.value is not None:
        return item.value
    if item.shape is None and item.dtype is None:
        return "scalar"
    return shape_text(item.shape) + (f" {item.dtype or ''}" if dtype else "")


HEADERS = (("name", False), ("tensor", False), ("bytes", True), ("status", False))
NAME_MIN = 6  # the name column's least width, while the panel has the room
VALUE_MIN = 8  # a scalar's value cut to keep names apart keeps this many cells


def storage_cells(cost: SavedCost | None, names: Mapping[int, str]) -> tuple[Text, Text]:
    """The storage column, long and short: a leaf's (not counted), a view of a bigger storage,
    the node's other saved tensors on it (``= other``), the other nodes that save it (``+ #7``);
    empty for a storage of its own. ``names``: node id -> its name (trace strings: shown as
    plain text, never markup)."""
    if cost is None:
        return Text(""), Text("")
    if cost.leaf:
        return (Text("leaf: not counted", style="dim"), Text("leaf", style="dim"))
    long, short = Text(), Text()
    if cost.view:
        long.append(f"view of {nbytes(cost.bytes)}", style="yellow")
        short.append("view", style="yellow")
    if cost.here:
        for text in (long, short):
            text.append(" " if text else "")
        long.append("= " + ", ".join(cost.here), style="cyan")
        short.append("=" + cost.here[0], style="cyan")
    if cost.others:
        for text in (long, short):
            text.append(" " if text else "")
        nodes = dict.fromkeys(node for node, _ in cost.others)
        if len(nodes) == 1:
            node = next(iter(nodes))
            saved = ", ".join(name for _, name in cost.others)
            long.append(f"+ {names.get(node, '?')} #{node} {saved}", style="cyan")
            short.append(f"+#{node}", style="cyan")
        else:
            long.append(f"+ {len(nodes)} nodes", style="cyan")
            short.append(f"+{len(nodes)}", style="cyan")
    return long, short


def _after(status: Text, share: Text) -> Text:
    if not share:
        return status
    out = status.copy()
    if out:
        out.append(" ")
    out.append_text(share)
    return out


def saved_table(saved: list[SavedInfo], released: bool, width: int,
                costs: list[SavedCost | None] | None = None,
                node_names: Mapping[int, str] | None = None) -> Text:
    """One line a saved tensor under a header: name, shape and dtype, bytes, status, each column
    padded a cell either side and spread over ``width`` as rich's expanded ``Table`` does,
    drawn as text (a ``Table`` measured and laid out its cells again on every frame: 2 ms of a
    35 ms pass change). The shape, bytes and status are what the panel is for: they keep their
    width (one cell short, the last column's right pad goes at the panel's edge). Long names are
    cut in the middle, where they stay apart (``mat1…sizes``, ``mat2…strides``), and on a narrow panel
    the dtype goes before a name is cut below 8 cells.

    ``costs`` (the pass's memory event says them, ``state/memory_table.saved_costs``): the bytes
    are the storage's, and after the status it says which tensors share one (``storage_cells``),
    its long form (``+ AddmmBackward0 #2 mat1``) giving way to the short (``+#2``) before a
    dtype or a name's cell would."""
    statuses = [status_text(item, released) for item in saved]
    sizes = ["" if item.shape is None and item.dtype is None else nbytes(item.bytes)
             for item in saved]
    if costs is not None:
        sizes = [nbytes(cost.bytes) if cost is not None and not cost.leaf else size
                 for size, cost in zip(sizes, costs, strict=True)]
        both = [storage_cells(cost, node_names or {}) for cost in costs]
        dtypes = max(len(c) for c in [*(tensor_cell(i, True) for i in saved), "tensor"])
        whole = max(len(item.name) for item in saved)
        for form in (0, 1):  # the long form, unless it would cost a dtype or a name's cells
            shared = [_after(status, pair[form]) for status, pair in zip(statuses, both,
                                                                        strict=True)]
            fixed = max(len(b) for b in [*sizes, "bytes"]) + \
                max(s.cell_len for s in [*shared, Text("status")]) + 2 * len(HEADERS) - 1
            if not width or width - fixed - dtypes >= whole:
                break
        statuses = shared
    fixed = max(len(b) for b in [*sizes, "bytes"]) + \
        max(s.cell_len for s in [*statuses, Text("status")]) + 2 * len(HEADERS) - 1
    names = max(len(item.name) for item in saved)
    want = apart_width([item.name for item in saved])
    for dtype in (True, False):
        cells = [tensor_cell(item, dtype) for item in saved]
        column = max(len(c) for c in [*cells, "tensor"])
        if width and width - fixed - column < want:
            # scalars' values (sizes, strides) give way, cut in the middle, to keep names apart
            held = max((len(c) for c, item in zip(cells, saved, strict=True)
                        if item.value is None), default=0)
            column = max(held, len("tensor"), VALUE_MIN, width - fixed - want)
            cells = [cut_middle(c, column) if item.value is not None else c
                     for c, item in zip(cells, saved, strict=True)]
            column = max(len(c) for c in [*cells, "tensor"])
        room = width - fixed - column if width else names
        if room >= min(names, 8):
            break
    room = max(room, 4)
    names_cut = cut_apart([item.name for item in saved], room)  # siblings kept apart
    rows = list(zip(names_cut, cells, sizes, statuses, strict=True))
    content = [max(len(r[0]) for r in rows), max(len(r[1]) for r in rows),
               max(len(r[2]) for r in rows), max(r[3].cell_len for r in rows)]
    content = [max(c, len(title)) for c, (title, _) in zip(content, HEADERS, strict=True)]
    content[0] = max(content[0], min(NAME_MIN, room))
    widths = [c + 2 for c in content]
    edge = " "  # the last column's right pad: the first cell to go at the panel's edge
    if width and sum(widths) < width:
        widths = [w + extra for w, extra in
                  zip(widths, ratio_distribute(width - sum(widths), widths), strict=True)]
    elif width and sum(widths) > width:
        edge = ""
    inner = [w - 2 for w in widths]
    lines = [Text()]
    for (title, right), cells in zip(HEADERS, inner, strict=True):
        lines[0].append(f" {title.rjust(cells) if right else title.ljust(cells)} ",
                        style="bold dim")
    if not edge:
        lines[0].right_crop(1)
    for name, cell, size, status in rows:
        line = Text()
        line.append(f" {name.ljust(inner[0])} ", style="bold")
        line.append(f" {cell.ljust(inner[1])} ")
        line.append(f" {size.rjust(inner[2])} ")
        line.append(" ")
        status = status.copy()
        status.pad_right(inner[3] - status.cell_len)  # in the status's own style
        line.append_text(status)
        line.append(edge)
        lines.append(line)
    if width:  # too narrow for even the cut names: cut at the edge, never wrapped
        for line in lines:
            line.truncate(width, overflow="ellipsis")
    return Text("\n").join(lines)


class _Names(Mapping[int, str]):
    """Node id -> its name, read from the graph only for the ids asked."""

    def __init__(self, nodes: Mapping[int, Any]) -> None:
        self._nodes = nodes

    def __getitem__(self, node: int) -> str:
        return self._nodes[node].name

    def __iter__(self) -> Iterator[int]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


MIN_ROWS, MAX_ROWS = 5, 11  # the panel's rows, borders included, while the column has them


def fit(table: Text | None, rest: list[Text], room: int) -> list[Text]:
    """What of the panel's parts fits ``room`` lines: the saved tensors' rows first, then the
    table's header, then the lines under it (the footer, a note); rows that do not fit are
    counted on the last line (``+3 more``)."""
    lines = table.split("\n") if table is not None else []
    extra = sum(len(part.split("\n")) for part in rest)
    if len(lines) + extra <= room or table is None:
        return ([table] if table is not None else []) + rest
    kept: list[Text] = []
    for part in rest:  # the lines under the table, while there is room for them too
        if len(lines) + len(part.split("\n")) + sum(len(k.split("\n")) for k in kept) <= room:
            kept.append(part)
    room -= sum(len(k.split("\n")) for k in kept)
    if len(lines) <= room:
        return [table, *kept]
    header, rows = lines[:1], lines[1:]
    if room < 3:  # a row or two: the rows say more than the header
        header = []
    show = max(room - len(header) - 1, 1) if len(rows) > room - len(header) else len(rows)
    more = len(rows) - show
    out = header + rows[:show]
    if more > 0 and len(out) < room:
        out.append(Text(f" +{more} more", style="dim italic"))
    elif more > 0:
        out[-1] = Text(f" +{more + 1} more", style="dim italic")
    return [Text("\n").join(out), *kept]


class SavedPanel(Static):
    """Each saved tensor or scalar: shape, dtype, bytes, alive / freed / modified in place.

    As tall as its lines, ``MIN_ROWS`` to ``MAX_ROWS`` rows, but never more than the column
    leaves it once the panels above keep their minimum height (``get_content_height``): on a
    short screen (80x24 under a diagnosis banner) it is not pushed past the column's bottom,
    and it shows the saved tensors' rows first, its header and footer as they fit (``fit``)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.border_title = "Saved tensors"
        # the lines it would take whole: a new layout only when that changes, since a layout
        # pass repaints every scrollbar on screen
        self._wanted = 0
        self._focus: Focus | None = None
        self._fitted = (0, 0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """Its lines (``MIN_ROWS`` to ``MAX_ROWS`` rows), as many as the column has left when
        its other panels keep their min-height."""
        gutter = self.styles.gutter.height
        others = 0
        for sibling in self.parent.children if self.parent is not None else ():
            if sibling is not self and sibling.display and sibling.styles.min_height:
                others += int(sibling.styles.min_height.resolve(container, viewport))
        room = container.height - others  # (``container`` comes less this panel's borders)
        wanted = min(max(self._wanted + gutter, MIN_ROWS), MAX_ROWS) - gutter
        return max(min(wanted, room), 1)

    def on_resize(self) -> None:
        """Fit the table to the new size (names cut, or dtypes dropped, on a narrow panel;
        rows first on a short one)."""
        region = self.content_region
        if self._focus is not None and (region.width, region.height) != self._fitted:
            self.show(self._focus)

    def show(self, focus: Focus) -> None:
        self._focus = focus
        region = self.content_region
        self._fitted = (region.width, region.height)
        parts: list[Text] = []
        table: Text | None = None
        saved = focus.saved
        view = focus.snapshot.pass_
        released = focus.record is not None and view is not None and not view.retain_graph
        if focus.info is None:
            parts.append(Text("no node selected", style="dim"))
        elif saved is None:
            parts.append(Text("not reached yet: saved tensors are read when the pass gets here",
                              style="dim italic"))
        elif not saved:
            parts.append(Text("this node saved nothing", style="dim"))
        else:
            costs = saved_costs(view, focus.info.id, saved)
            node_names = _Names(view.graph.nodes) if view is not None else None
            table = saved_table(saved, released, region.width, costs, node_names)
            if any(item.status == "unknown" for item in saved):
                parts.append(Text(UNKNOWN_LINE, style="dim italic"))
        if view is not None:
            memory = held_now(view)
            if memory is not None:  # each storage once, leaves left out, as M counts them
                held, freed = memory[1], memory[0] - memory[1]
            else:
                held, freed = view.saved_totals(focus.snapshot.stop)
            line = Text.assemble(("pass ", "dim"), (str(view.number), "bold"),
                                 ("  held ", "dim"), (nbytes(held), "green"),
                                 ("  freed ", "dim"), (nbytes(freed), ""))
            if view.retain_graph:
                line.append("  (retain_graph: nothing is freed)", style="dim")
            parts.append(line)
        if region.width:  # a line longer than the panel wraps: what it takes, as drawn
            parts = [Text("\n").join(part.wrap(self.app.console, region.width))
                     for part in parts]
        wanted = sum(len(part.split("\n")) for part in ([table] if table else []) + parts)
        layout = wanted != self._wanted
        self._wanted = wanted
        if region.height:
            parts = fit(table, parts, region.height)
        elif table is not None:
            parts = [table, *parts]
        self.update(Text("\n").join(parts), layout=layout)
