"""The saved-tensors panel: what the node kept from the forward pass, and the pass's totals."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from backstep.tui.focus import Focus
from backstep.tui.format import cut_middle, nbytes, shape_text
from backstep.tui.snapshot import SavedInfo

STATUS_STYLE = {"alive": "green", "freed": "dim", "modified": "bold red"}


def status_text(item: SavedInfo, released: bool = False) -> Text:
    """The status; ``released`` when the node has run in a pass that does not retain the graph
    (the engine reports the status as seen before the node ran, and PyTorch frees right after)."""
    if released and item.status == "alive" and item.shape is not None:
        return Text("freed", style="dim")
    text = Text(item.status, style=STATUS_STYLE.get(item.status, ""))
    if item.version_saved is not None and item.version_now is not None and (
        item.status == "modified" or item.version_now != item.version_saved
    ):
        text.append(f" v{item.version_saved}→v{item.version_now}", style="red")
    return text


class SavedPanel(Static):
    """Each saved tensor or scalar: shape, dtype, bytes, alive / freed / modified in place."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.border_title = "Saved tensors"
        # what decides the panel's (auto) height: a new layout only when that changes, since a
        # layout pass repaints every scrollbar on screen
        self._shape: tuple[object, ...] = ()
        self._focus: Focus | None = None
        self._width = 0

    def on_resize(self) -> None:
        """Fit the table to the new width (names cut, or dtypes dropped, on a narrow panel)."""
        if self._focus is not None and self.content_region.width != self._width:
            self.show(self._focus)

    def show(self, focus: Focus) -> None:
        self._focus = focus
        self._width = self.content_region.width
        parts: list[Table | Text] = []
        shape: list[object] = []
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
            # the shape, bytes and status are what the panel is for: they keep their width; a
            # long name is cut in the middle (it has a prefix and a suffix: mat1_sym_sizes_0),
            # and on a narrow panel the dtype goes before the name is cut below 8 cells
            statuses = [status_text(item, released) for item in saved]
            sizes = ["" if item.shape is None and item.dtype is None else nbytes(item.bytes)
                     for item in saved]
            fixed = max(len(b) for b in [*sizes, "bytes"]) + \
                max(s.cell_len for s in [*statuses, Text("status")]) + 7  # the gaps, a cell at the left
            width = self.content_region.width
            names = max(len(item.name) for item in saved)
            for dtype in (True, False):
                cells = [("scalar" if item.shape is None and item.dtype is None
                          else shape_text(item.shape) + (f" {item.dtype or ''}" if dtype else ""))
                         for item in saved]
                room = width - fixed - max(len(c) for c in [*cells, "tensor"]) if width else names
                if room >= min(names, 8):
                    break
            room = max(room, 4)
            table = Table(box=None, padding=(0, 1), expand=True, show_edge=False)
            table.add_column("name", style="bold", no_wrap=True, header_style="dim", min_width=6,
                             overflow="ellipsis")
            table.add_column("tensor", no_wrap=True, header_style="dim",
                             min_width=max(len(c) for c in cells))
            # (no minimum widths while the table fits with room to spare: rich shares the room
            # out the same; near the edge it would cut the status column first)
            tight = bool(width) and room < names + 4
            table.add_column("bytes", no_wrap=True, header_style="dim", justify="right",
                             min_width=max(len(b) for b in [*sizes, "bytes"]) if tight else None)
            table.add_column("status", no_wrap=True, header_style="dim",
                             min_width=max(s.cell_len for s in [*statuses, Text("status")])
                             if tight else None)
            for item, tensor, size, status in zip(saved, cells, sizes, statuses, strict=True):
                table.add_row(cut_middle(item.name, room), tensor, size, status)
            parts.append(table)
            shape.append(("rows", len(saved)))  # one line a row (no_wrap), and the header
        if view is not None:
            held, freed = view.saved_totals(focus.snapshot.stop)
            line = Text.assemble(("pass ", "dim"), (str(view.number), "bold"),
                                 ("  held ", "dim"), (nbytes(held), "green"),
                                 ("  freed ", "dim"), (nbytes(freed), ""))
            if view.retain_graph:
                line.append("  (retain_graph: nothing is freed)", style="dim")
            parts.append(line)
            shape.append(("footer", len(line.plain)))  # it wraps when longer than the panel
        if parts and isinstance(parts[0], Text):  # a message instead of the table
            shape.append(("message", parts[0].plain))
        self.update(Group(*parts), layout=tuple(shape) != self._shape)
        self._shape = tuple(shape)
