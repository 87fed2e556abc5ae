"""The keys that reach the script: step, continue and finish (``n``, ``c``, ``f``), ctrl+c,
stdin by hand (``i``) and quit (``q``), and the commands they send through the app's link.

A mixin of ``BackstepApp``; ``show`` (``ReplayApp``) overrides the stepping keys to move its
cursor instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backstep.tui.panels.console import ConsolePanel
from backstep.tui.state.review import forward

if TYPE_CHECKING:  # the mixin's self is the app, as the AppHost protocol describes it
    from backstep.tui.actions.host import AppHost as _App
else:
    _App = object


class Commands(_App):
    """Commands to the debuggee, each from a key."""

    def send(self, message: dict[str, Any]) -> bool:
        if self.link is None:
            return False
        return self.link.send(message)

    def _paused(self) -> bool:
        if self.snapshot.stop is not None and not self.waiting and self.gone is None:
            return True
        if self.snapshot.exit is not None:
            self.notify("the script has exited; q quits", timeout=2)
        else:
            self.notify("not paused: ctrl+c stops at the next node", timeout=2)
        return False

    def action_step(self) -> None:
        if self.searching is not None:  # n browses the matches while a search is up
            self.action_search_step(1)
            return
        if self.review is not None:  # reviewing: n walks forward to the live stop
            self._review_to(forward(self.snapshot, self._ended(), self.review))
            return
        self.action_resume("step")

    def _addressed(self, message: dict[str, Any]) -> dict[str, Any]:
        """A command for the shown stop, naming it: with several passes paused, a command that
        arrives after that stop resumed is refused instead of resuming another pass."""
        stop = self.snapshot.stop
        if stop is not None and stop.stop is not None:
            message["stop"] = stop.stop
        return message

    def action_resume(self, command: str) -> None:
        if not self._paused():
            return
        # before the send: the next stop may be read before send returns
        # progress is drawn seldom until the next stop
        self.reader.resumed(through=command != "step")
        if self.send(self._addressed({"cmd": command})):
            self.review = None
            self.waiting = True
            self._diagnosis_new = False
            self.query_one(ConsolePanel).hold_height()  # until the next stop (or the end)
            self._refresh_status()

    def action_interrupt(self) -> None:
        if self.cancel_evaluation():
            return
        if self.snapshot.exit is None and self.gone is None:
            self.send({"cmd": "interrupt"})
            self.notify("interrupt: stopping at the next node", timeout=2)

    def action_quit_session(self) -> None:
        """q: the script's exit code once it has ended, else it is ended here (SIGTERM: 143,
        as a shell reports it). The console's lines stay for ``backstep run`` to print."""
        code = self.snapshot.exit.code if self.snapshot.exit is not None else self.exit_code
        if self.link is not None:
            self.link.close()
            if code is None:
                status = self.link.returncode()
                code = 128 - status if status is not None and status < 0 else status
        self.console_lines = list(self.query_one(ConsolePanel).log_view.lines)
        self.exit(code if code is not None else 0)

    def action_input(self) -> None:
        """Open the console's input line by hand (for reads the debuggee cannot see)."""
        if getattr(self.link, "write_stdin", None) is None or \
                not self.query_one(ConsolePanel).offer_input():
            self.notify("the script's stdin is closed", timeout=2)
