"""``g`` in ``backstep show``: where to go, a pass or pass:step."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


def parse_goto(text: str, current: int | None) -> tuple[int, int | None] | None:
    """``"3"`` is pass 3; ``"3:12"`` pass 3 before step 12; ``":12"`` step 12 of this pass."""
    text = text.strip()
    try:
        if ":" in text:
            number, step = text.split(":", 1)
            number_i = int(number) if number.strip() else current
            return (number_i, int(step)) if number_i is not None else None
        return int(text), None
    except ValueError:
        return None


class GotoDialog(ModalScreen[str | None]):
    """Asks where to go: a pass, or pass:step."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    DEFAULT_CSS = """
    #goto-box { width: 60; max-width: 100%; height: auto; border: round $accent; padding: 0 1; }
    GotoDialog { align: center middle; }
    """

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box"):
            yield Static("go to pass N, or N:STEP, or :STEP in this pass")
            yield Input(placeholder="2:15", id="goto-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
