"""The breakpoint dialog (``B``): conditions beyond "this node type", as protocol breakpoint
dicts. The keys that open it and toggle a breakpoint are ``BackstepApp``'s (``tui/app.py``)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, Select, Static
from textual.widgets.option_list import Option

from backstep import protocol
from backstep.events.breakpoints import parse_breakpoint

KINDS = (
    ("node name glob", "node"),
    ("module glob", "module"),
    ("leaf name", "leaf"),
    ("non-finite gradient", "nonfinite"),
    ("gradient norm above", "norm"),
)
PLACEHOLDERS = {"node": "MulBackward*", "module": "model.encoder.*", "leaf": "model.fc.weight",
                "nonfinite": "(no value)", "norm": "1e3"}


def describe(bp: dict[str, Any]) -> str:
    kind = bp.get("kind")
    if kind == "nonfinite":
        return "non-finite gradient"
    if kind == "norm":
        return f"gradient norm above {bp.get('above')}"
    if kind == "leaf":
        return f"leaf {bp.get('name')}"
    return f"{kind} {bp.get('pattern')}"


def make_breakpoint(kind: str, value: str) -> dict[str, Any]:
    """A protocol breakpoint from the dialog's fields; ProtocolError when the value is wrong."""
    value = value.strip()
    if kind == "nonfinite":
        return {"kind": "nonfinite"}
    if not value:
        raise protocol.ProtocolError("this kind of breakpoint needs a value")
    return parse_breakpoint(f"{kind}:{value}")


class BreakpointDialog(ModalScreen[list[dict[str, Any]] | None]):
    """Add conditions, delete the highlighted one (delete key), then close with Done or escape."""

    BINDINGS = [Binding("escape", "done", "done"), Binding("delete", "remove", "remove")]
    # under 66 columns the kind goes on a row of its own: beside it, the value and the Add
    # button would be squeezed, the button cut by the dialog's border (a notebook's frame)
    HORIZONTAL_BREAKPOINTS = [(0, "-cramped"), (66, "-roomy")]

    def __init__(self, breakpoints: list[dict[str, Any]]) -> None:
        super().__init__()
        self.breakpoints = [dict(bp) for bp in breakpoints]

    def compose(self) -> ComposeResult:
        with Vertical(id="bp-box"):
            yield Static("Breakpoints", id="bp-title")
            yield OptionList(id="bp-list")
            with Horizontal(id="bp-form"):
                yield Select(KINDS, value="node", allow_blank=False, id="bp-kind")
                with Horizontal(id="bp-entry"):
                    yield Input(placeholder=PLACEHOLDERS["node"], id="bp-value")
                    yield Button("Add", id="bp-add", variant="primary")
            yield Static("", id="bp-error")
            with Horizontal(id="bp-buttons"):
                yield Button("Remove selected", id="bp-remove")
                yield Button("Done", id="bp-done")

    def on_mount(self) -> None:
        self._refresh_list()
        self.query_one("#bp-value", Input).focus()

    def _refresh_list(self) -> None:
        options = self.query_one("#bp-list", OptionList)
        options.clear_options()
        if not self.breakpoints:
            options.add_option(Option(Text("no breakpoints", style="dim"), disabled=True))
        for i, bp in enumerate(self.breakpoints):
            options.add_option(Option(Text.assemble(("● ", "red"), describe(bp)), id=f"bp{i}"))

    @on(Select.Changed, "#bp-kind")
    def _kind(self, event: Select.Changed) -> None:
        field = self.query_one("#bp-value", Input)
        field.placeholder = PLACEHOLDERS.get(str(event.value), "")
        field.disabled = event.value == "nonfinite"

    @on(Button.Pressed, "#bp-add")
    @on(Input.Submitted, "#bp-value")
    def add(self) -> None:
        kind = str(self.query_one("#bp-kind", Select).value)
        field = self.query_one("#bp-value", Input)
        error = self.query_one("#bp-error", Static)
        try:
            bp = make_breakpoint(kind, field.value)
        except protocol.ProtocolError as exc:
            error.update(Text(str(exc), style="bold red"))
            return
        error.update("")
        if bp not in self.breakpoints:
            self.breakpoints.append(bp)
        field.value = ""
        self._refresh_list()

    @on(Button.Pressed, "#bp-remove")
    def action_remove(self) -> None:
        options = self.query_one("#bp-list", OptionList)
        index = options.highlighted
        if index is None:
            return
        option = options.get_option_at_index(index)
        if option.id and option.id.startswith("bp"):
            del self.breakpoints[int(option.id[2:])]
            self._refresh_list()

    @on(Button.Pressed, "#bp-done")
    def action_done(self) -> None:
        self.dismiss(self.breakpoints)
