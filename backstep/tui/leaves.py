"""The leaves panel: each leaf's .grad before this pass and now, and gradient flow per parameter."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from backstep.tui.format import bar_chart, num
from backstep.tui.model import Accumulation, Snapshot, Summary, number


def grad_text(summary: Summary | None, pending: bool = False) -> Text:
    """A scalar's value, a small tensor's values, or a bigger tensor's norm."""
    if summary is None:
        return Text("pending" if pending else "None", style="dim")
    values = summary.get("values")
    if isinstance(values, list) and len(values) == 1:
        return num(values[0])
    return Text("‖·‖ ").append_text(num(summary.get("norm")))


def change_text(acc: Accumulation) -> Text:
    after, before = acc.after, acc.before
    if after is None:
        return Text("")
    a_vals = after.get("values")
    b_vals = before.get("values") if before is not None else None
    if isinstance(a_vals, list) and len(a_vals) == 1:
        b = number(b_vals[0]) if isinstance(b_vals, list) and len(b_vals) == 1 else 0.0
        a = number(a_vals[0])
        if a is not None and b is not None:
            return Text(f"{a - b:+.4g}", style="yellow")
    a_norm = number(after.get("norm"))
    b_norm = number(before.get("norm")) if before is not None else 0.0
    if a_norm is None or b_norm is None:
        return Text("?", style="red")
    return Text(f"‖·‖ {a_norm - b_norm:+.4g}", style="yellow")


class LeavesPanel(VerticalScroll):
    """A table of the leaves the pass touches and a bar chart of their gradient norms."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Leaves (.grad)"
        self._body = Static("")

    def compose(self):  # type: ignore[no-untyped-def]
        yield self._body

    def show(self, snapshot: Snapshot) -> None:
        view = snapshot.pass_
        if view is None:
            self._body.update(Text("no backward pass yet", style="dim"))
            return
        accs = {a.leaf: a for a in view.accumulations()}
        names: list[str] = []
        for info in view.graph.nodes.values():
            if info.leaf and info.leaf not in names:
                names.append(info.leaf)
        names += [n for n in accs if n not in names]
        table = Table(box=None, padding=(0, 1), expand=True, show_edge=False)
        for column in ("leaf", "before", "now", "change", "passes"):
            table.add_column(column, header_style="dim", no_wrap=True,
                             justify="left" if column == "leaf" else "right")
        for name in names:
            acc = accs.get(name)
            if acc is None:
                table.add_row(Text(name, style="green"), "", grad_text(None, pending=True), "", "")
                continue
            label = Text(name, style="green")
            if acc.retained:
                label.append(" (retain_grad)", style="dim")
            table.add_row(label, grad_text(acc.before), grad_text(acc.after), change_text(acc),
                          str(acc.passes_since_zeroed))
        if not names:
            table.add_row(Text("this pass reaches no leaf", style="dim"), "", "", "", "")
        chart_names = [n for n in names if n in snapshot.leaf_norms]
        self._body.update(Group(table, Text("\ngrad norm per parameter", style="dim"),
                                bar_chart(snapshot.leaf_norms, names=chart_names)))
