"""Breakpoints in the UI: the dialog for conditions beyond "this node type" (protocol breakpoint
dicts), and the app's breakpoint keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, Select, Static
from textual.widgets.option_list import Option

from backstep import protocol
from backstep.tui.focus import focus

if TYPE_CHECKING:  # the mixin's self is the app; at run time it is a plain mixin
    from backstep.tui.app import BackstepApp

    _App = BackstepApp
else:
    _App = object

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
    return protocol.parse_breakpoint(f"{kind}:{value}")


class BreakpointDialog(ModalScreen[list[dict[str, Any]] | None]):
    """Add conditions, delete the highlighted one (delete key), then close with Done or escape."""

    BINDINGS = [Binding("escape", "done", "done"), Binding("delete", "remove", "remove")]

    def __init__(self, breakpoints: list[dict[str, Any]]) -> None:
        super().__init__()
        self.breakpoints = [dict(bp) for bp in breakpoints]

    def compose(self) -> ComposeResult:
        with Vertical(id="bp-box"):
            yield Static("Breakpoints", id="bp-title")
            yield OptionList(id="bp-list")
            with Horizontal(id="bp-form"):
                yield Select(KINDS, value="node", allow_blank=False, id="bp-kind")
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


class BreakpointActions(_App):
    """The app's breakpoint keys (``b``, ``B``): a mixin of ``BackstepApp``."""

    def action_toggle_break(self) -> None:
        f = focus(self.snapshot, self.selected)
        if f.info is None:
            self.notify("select a node first", timeout=2)
            return
        bp = {"kind": "node", "pattern": f.info.name}
        if bp in self.breakpoints:
            self.breakpoints.remove(bp)
            self.notify(f"breakpoint removed: {describe(bp)}", timeout=2)
        else:
            self.breakpoints.append(bp)
            self.notify(f"breakpoint set: {describe(bp)}", timeout=2)
        self._send_breakpoints()

    def action_break_dialog(self) -> None:
        def done(result: list[dict[str, Any]] | None) -> None:
            if result is not None and result != self.breakpoints:
                self.breakpoints = result
                self._send_breakpoints()

        self.push_screen(BreakpointDialog(self.breakpoints), done)

    def _send_breakpoints(self) -> None:
        self.send({"cmd": "break", "breakpoints": list(self.breakpoints)})
        self._refresh_status()
