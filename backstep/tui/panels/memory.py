"""The memory view (``M``): what the pass in view's graph holds in saved activations, by
module, op or line, largest first, draining as the pass runs (``state/memory_table``). Choosing
a row (enter, a click) selects the nodes that save its storages: the nodes whose running
releases that memory."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from backstep.traces.memory import BY
from backstep.tui.state.memory_table import MemoryTable, memory_table
from backstep.tui.state.snapshot import Snapshot
from backstep.units import human_bytes

NO_MEMORY = ("no memory recorded for this pass (a trace from an older backstep, or no pass "
             "yet)")
COLUMNS = (("saved", True), ("share", True), ("still held", True), ("storages", True))
Chosen = tuple[str, tuple[int, ...]]  # a row's key and the nodes that save its storages


def cells(row: dict[str, Any], total: int) -> list[Text]:
    """A row's cells, every string from the trace as plain text (never markup)."""
    share = f"{100 * row['bytes'] / total:.1f}%" if total else "-"
    held = Text(human_bytes(row["held"]), style="bold" if row["held"] else "dim",
                justify="right")
    return [Text(row["key"]), Text(human_bytes(row["bytes"]), justify="right"),
            Text(share, justify="right"), held, Text(str(row["storages"]), justify="right")]


def total_line(found: MemoryTable) -> Text:
    return Text.assemble(("total ", "bold"), (human_bytes(found.total), "bold"),
                         (" saved · ", "dim"), (human_bytes(found.held), "bold"),
                         (" still held", "dim"))


class MemoryScreen(ModalScreen[Chosen | None]):
    """A full view over the panels; escape, q or M closes it, b changes the grouping, enter (or
    a click) on a row closes it and selects, in the graph, the nodes that save the row's
    storages (the app lets n / N go through them, as a search's matches)."""

    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("q", "dismiss", "close"),
                Binding("M", "dismiss", "close"),
                Binding("b", "by", "group by module, op or line")]

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self._snapshot = snapshot
        self.by = BY[0]
        self.found: MemoryTable | None = None
        self._keys: list[str] = []  # the table's rows' keys, in its order

    def compose(self) -> ComposeResult:
        with Vertical(id="memory-box"):
            yield Static("", id="memory-none")
            yield DataTable(id="memory-table", cursor_type="row", zebra_stripes=False)
            yield Static("", id="memory-total")

    def on_mount(self) -> None:
        self.show(self._snapshot)
        self.query_one(DataTable).focus()

    def action_dismiss(self, result: Chosen | None = None) -> None:  # type: ignore[override]
        self.dismiss(result)

    def action_by(self) -> None:
        self.by = BY[(BY.index(self.by) + 1) % len(BY)]
        self.show(self._snapshot)

    @on(DataTable.RowSelected)
    def _chosen(self, event: DataTable.RowSelected) -> None:
        event.stop()
        row = event.cursor_row
        if self.found is None or not 0 <= row < len(self._keys):
            return
        key = self._keys[row]
        nodes = self.found.nodes.get(key, ())
        if not nodes:
            self.notify("no node of this pass saves these storages", timeout=2)
            return
        self.dismiss((key, nodes))

    def show(self, snapshot: Snapshot) -> None:
        """Redraw for a snapshot (the app calls this as the pass runs); the cursor stays on
        its row."""
        self._snapshot = snapshot
        view = snapshot.pass_
        found = self.found = memory_table(view, self.by)
        box = self.query_one("#memory-box")
        title = "Memory: saved activations"
        if view is not None:
            title += f" · pass {view.number}"
        if found is not None:
            title += (f" · {human_bytes(found.held)} of {human_bytes(found.total)} still held"
                      f" after {found.step} nodes")
        box.border_title = title
        left = f"leaves left out: {human_bytes(found.leaves)} · " if found and found.leaves else ""
        box.border_subtitle = (f"{left}enter: select its nodes · b: by {self.by} · "
                               "escape closes")
        table = self.query_one(DataTable)
        none = self.query_one("#memory-none", Static)
        none.display = found is None
        table.display = found is not None
        self.query_one("#memory-total").display = found is not None
        if found is None:
            none.update(Text(NO_MEMORY, style="dim italic"))
            self._keys = []
            return
        was = self._keys[table.cursor_row] if 0 <= table.cursor_row < len(self._keys) else None
        heading = Text(self.by)
        if [str(c.label) for c in table.columns.values()][:1] != [self.by]:
            table.clear(columns=True)
            table.add_column(heading, key="key")
            for title, _right in COLUMNS:
                table.add_column(Text(title, justify="right"), key=title)
        else:
            table.clear()
        self._keys = [row["key"] for row in found.rows]
        for row in found.rows:
            table.add_row(*cells(row, found.total))
        if was in self._keys:
            table.move_cursor(row=self._keys.index(was), animate=False)
        self.query_one("#memory-total", Static).update(total_line(found))
