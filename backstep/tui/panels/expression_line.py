"""The expression console's input line (``:`` or ``!`` at a stop, as pudb's shell): enter sends
the line, up / down recall earlier ones, escape goes back to the graph.

It only edits text: what a line means is the debuggee's business (or, in ``show``, the trace
console's). ctrl+c is the app's (a priority binding): it interrupts a line being evaluated.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input

HISTORY = 500  # lines kept for up / down


PLACEHOLDER = ("python at the stop: grad_outputs, grad_inputs, saved, node, leaves, _ · edits: "
               "zero_nonfinite() clip(n) scale(k) set_grad(i, t)")
# show's console reads a recording: it has names to read, and no edit it could apply
READ_ONLY_PLACEHOLDER = ("python over the recording: grad_outputs, grad_inputs, saved, node, "
                         "leaves, _ (summaries; no edits: a trace holds no tensors)")


class ExpressionLine(Input):
    """One line of Python for the paused node; keeps its own history."""

    BINDINGS = [
        Binding("up", "history(-1)", "earlier line", show=False),
        Binding("down", "history(1)", "later line", show=False),
        Binding("escape", "leave", "back", show=False),
    ]

    class Asked(Message):
        """The person sent a line."""

        def __init__(self, source: str) -> None:
            super().__init__()
            self.source = source

    def __init__(self, **kwargs: object) -> None:
        super().__init__(placeholder=PLACEHOLDER, **kwargs)  # type: ignore[arg-type]
        self.history: list[str] = []
        self._at: int | None = None  # the recalled line's index while browsing
        self._draft = ""  # what was typed before browsing began

    def open(self, text: str = "") -> None:
        """Show the line, with ``text`` in it, and give it the keyboard."""
        self.display = True
        self.value = text
        self.cursor_position = len(text)
        self._at = None
        self.focus()

    def action_history(self, delta: int) -> None:
        if not self.history:
            return
        if self._at is None:
            if delta > 0:
                return
            self._draft = self.value
            at = len(self.history) - 1
        else:
            at = self._at + delta
        if at >= len(self.history):
            self._at = None
            self.value = self._draft
        else:
            self._at = max(at, 0)
            self.value = self.history[self._at]
        self.cursor_position = len(self.value)

    def clear_if_focused(self) -> bool:
        """ctrl+c with nothing running: empty the line if it has the keyboard (True)."""
        if not self.has_focus:
            return False
        self.value = ""
        return True

    def action_leave(self) -> None:
        self.display = False
        self.screen.focus_next("#graph")

    async def action_submit(self) -> None:
        source = self.value
        if not source.strip():
            return
        if not self.history or self.history[-1] != source:
            self.history.append(source)
            del self.history[:-HISTORY]
        self._at = None
        self.value = ""
        self.post_message(self.Asked(source))
