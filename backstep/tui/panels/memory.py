"""The memory view (``M``): what the pass in view's graph holds in saved activations, by
module, op or line, largest first, draining as the pass runs (``state/memory_table``)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from backstep.traces.memory import BY
from backstep.tui.state.memory_table import MemoryTable, memory_table
from backstep.tui.state.snapshot import Snapshot
from backstep.units import human_bytes


def render(found: MemoryTable | None, by: str) -> Table | Text:
    """The table (every string from the trace as plain text, never markup)."""
    if found is None:
        return Text("no memory recorded for this pass (a trace from an older backstep, or "
                    "no pass yet)", style="dim italic")
    grid = Table(box=None, expand=True, pad_edge=False)
    grid.add_column(by, ratio=1, overflow="fold")
    grid.add_column("saved", justify="right")
    grid.add_column("share", justify="right")
    grid.add_column("still held", justify="right")
    grid.add_column("storages", justify="right")
    for row in found.rows:
        share = f"{100 * row['bytes'] / found.total:.1f}%" if found.total else "-"
        held = Text(human_bytes(row["held"]), style="bold" if row["held"] else "dim")
        grid.add_row(Text(row["key"]), human_bytes(row["bytes"]), share, held,
                     str(row["storages"]))
    grid.add_row(Text("total", style="bold"), Text(human_bytes(found.total), style="bold"), "",
                 Text(human_bytes(found.held), style="bold"), "")
    return grid


class MemoryScreen(ModalScreen[None]):
    """A full view over the panels; escape, q or M closes it, b changes the grouping."""

    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("q", "dismiss", "close"),
                Binding("M", "dismiss", "close"),
                Binding("b", "by", "group by module, op or line")]

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self._snapshot = snapshot
        self.by = BY[0]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="memory-box"):
            yield Static("", id="memory-table")

    def on_mount(self) -> None:
        self.show(self._snapshot)

    def action_by(self) -> None:
        self.by = BY[(BY.index(self.by) + 1) % len(BY)]
        self.show(self._snapshot)

    def show(self, snapshot: Snapshot) -> None:
        """Redraw for a snapshot (the app calls this as the pass runs)."""
        self._snapshot = snapshot
        view = snapshot.pass_
        found = memory_table(view, self.by)
        box = self.query_one("#memory-box")
        title = "Memory: saved activations"
        if view is not None:
            title += f" · pass {view.number}"
        if found is not None:
            title += (f" · {human_bytes(found.held)} of {human_bytes(found.total)} still held"
                      f" after {found.step} nodes")
        box.border_title = title
        left = f"leaves left out: {human_bytes(found.leaves)} · " if found and found.leaves else ""
        box.border_subtitle = f"{left}b: by {self.by} · escape closes"
        self.query_one("#memory-table", Static).update(render(found, self.by))
