"""The live app's expression console: ``:`` / ``!`` open the input line at a stop, ``e`` opens it
with a gradient edit, enter sends an ``eval`` command to the paused thread, and the answer (or
traceback) comes back as an ``evaluated`` event, shown in the console panel. ctrl+c while a line
runs sends ``cancel``. A mixin of ``BackstepApp``; the debuggee does all the evaluating.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backstep.tui.messages import Evaluated
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.expression_line import ExpressionLine

if TYPE_CHECKING:  # the mixin's self is the app, as the AppHost protocol describes it
    from backstep.tui.actions.host import AppHost as _App
else:
    _App = object

EDIT_TEMPLATE = "zero_nonfinite()"


class ExpressionActions(_App):
    """Console keys and answers (mixed into ``BackstepApp``)."""

    _evaluating: dict[int, str]

    def action_expression(self, text: str = "") -> None:
        """``:`` / ``!``: a line of Python for the paused node."""
        if not self._paused():
            return
        self.query_one(ConsolePanel).expression_line.open(text)

    def action_edit(self) -> None:
        """``e``: the input line with an edit of the node's gradient, to change or send."""
        self.action_expression(EDIT_TEMPLATE)
        if self.snapshot.stop is not None:
            self.notify("enter applies the edit for the rest of this pass (edits: "
                        "zero_nonfinite(), clip(max_norm), scale(k), set_grad(i, value))",
                        timeout=4)

    def on_expression_line_asked(self, message: ExpressionLine.Asked) -> None:
        # named handlers: Textual finds them through the MRO (an ``@on`` in a mixin it does not)
        console = self.query_one(ConsolePanel)
        console.asked(message.source)
        if not self._paused():
            return
        req = self._next_req
        self._next_req += 1
        sent = self.send(self._addressed(
            {"cmd": "eval", "req": req, "source": message.source}))
        if sent:
            self._evaluating[req] = message.source
        else:
            console.note("the debuggee is gone: nothing was evaluated")

    def on_evaluated(self, message: Evaluated) -> None:
        event: dict[str, Any] = message.event
        req = event.get("req")
        if isinstance(req, int):
            self._evaluating.pop(req, None)
        text = event.get("text")
        self.query_one(ConsolePanel).answer(text if isinstance(text, str) else "")

    def cancel_evaluation(self) -> bool:
        """ctrl+c: interrupt a line being evaluated (True), or clear the input line while it
        has the keyboard (True); False when ctrl+c means what it means elsewhere."""
        if self._evaluating:
            self.send({"cmd": "cancel"})
            self.notify("interrupting the console line", timeout=2)
            return True
        return self.query_one(ConsolePanel).expression_line.clear_if_focused()

    def evaluation_failed(self, req: int | None) -> bool:
        """An ``error`` reply to a console line (the stop resumed meanwhile): said in the
        console, as an answer would be. False when ``req`` is not a console line's."""
        return req is not None and self._evaluating.pop(req, None) is not None
