"""The expression console in ``backstep show`` (a mixin of ``ReplayApp``): ``:`` / ``!`` open
the same input line as in a live session, but a line runs here, over what the trace recorded
(``trace_console``), in a thread so that ctrl+c can interrupt it. ``e`` says why a trace cannot
be edited."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.expression_line import ExpressionLine
from backstep.tui.state.trace_console import TraceConsole

if TYPE_CHECKING:  # the mixin's self is the app, as the AppHost protocol describes it
    from backstep.tui.actions.host import AppHost as _App
else:
    _App = object


class ReplayConsoleActions(_App):
    """Console keys over a trace (before ``BackstepApp`` in ``ReplayApp``'s bases)."""

    trace_console: TraceConsole

    def action_expression(self, text: str = "") -> None:
        self.query_one(ConsolePanel).expression_line.open(text)

    def action_edit(self) -> None:
        self.notify("a trace holds no tensors: gradient edits need a live session "
                    "(backstep run)", timeout=3)

    def on_expression_line_asked(self, message: ExpressionLine.Asked) -> None:
        message.prevent_default()  # the live app's handler (sending to a debuggee) is not run
        console = self.query_one(ConsolePanel)
        console.asked(message.source)
        if not hasattr(self, "trace_console"):
            self.trace_console = TraceConsole()
        snapshot, selected = self.shown, self.selected
        self._evaluating[0] = message.source

        def run() -> None:
            text = self.trace_console.evaluate(snapshot, selected, message.source)
            self.call_from_thread(self._trace_answer, text)

        self.run_worker(run, thread=True, exclusive=True, group="trace-console")

    def _trace_answer(self, text: str) -> None:
        self._evaluating.pop(0, None)
        self.query_one(ConsolePanel).answer(text)

    def cancel_evaluation(self) -> bool:
        """ctrl+c: interrupt the line running (True), or clear the input line while it has the
        keyboard (True); False: ctrl+c quits, as elsewhere in ``show``."""
        console: Any = getattr(self, "trace_console", None)
        if self._evaluating and console is not None:
            console.interrupt()
            return True
        return self.query_one(ConsolePanel).expression_line.clear_if_focused()
