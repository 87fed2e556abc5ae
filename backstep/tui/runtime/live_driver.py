"""A live session as the app's driver: commands out through a ``Link``, snapshots back from the
reader thread that link runs.

The link (a socket in real use, a recorder in tests) is opened with this driver as its
``LinkedApp``: it reaches the reader and posts its messages to the app through it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from textual.message import Message

from backstep.tui.runtime.link import Link
from backstep.tui.runtime.reader import Reader
from backstep.tui.runtime.terminal_watch import end_if_gone
from backstep.tui.state import review
from backstep.tui.state.run_history import HistoryTable
from backstep.tui.state.snapshot import PassView, Snapshot

if TYPE_CHECKING:  # the app imports no driver: no circle
    from backstep.tui.app import BackstepApp


class LiveDriver:
    """Drives the script behind ``link``; what the reader posts goes to the app it starts with."""

    title = None
    key_help: dict[str, str] = {}  # the bindings' own words are a live session's
    help_title = "backstep — keys"
    status = None
    cannot_edit = None

    def __init__(self, link: Link | None) -> None:
        self.link = link
        quit_words = getattr(link, "quit_help", None)  # attach(): q lets the script run on
        if quit_words:
            self.key_help = {"quit_session": quit_words}
        self.host: BackstepApp | None = None
        self.reader = Reader(self.post_message)

    # -- what the link reaches (``LinkedApp``) ---------------------------------------------

    def post_message(self, message: Message) -> bool:
        return self.host.post_message(message) if self.host is not None else False

    def start_message(self) -> dict[str, Any]:
        """The ``start`` command the link sends once the debuggee says hello."""
        host = self._host()
        return {"cmd": "start", "breakpoints": list(host.breakpoints),
                "stop_at_pass_start": host.stop_at_pass_start}

    # -- the driver ------------------------------------------------------------------------

    def _host(self) -> BackstepApp:
        assert self.host is not None, "the driver has not started"
        return self.host

    def offers(self, action: str) -> bool:
        return action not in ("continue_back", "goto")  # a script runs one way only

    def attach(self, app: BackstepApp) -> None:
        self.host = app

    def start(self) -> None:
        host = self._host()
        host.set_interval(0.1, self.reader.flush)
        stdin = sys.__stdin__
        if not host.is_headless and stdin is not None and stdin.isatty():
            fd = stdin.fileno()  # the terminal Textual reads: if it hangs up unseen, end as a hangup
            cleanup = self.link.close if self.link is not None else None
            host.set_interval(1.0, lambda: end_if_gone(fd, cleanup))
        if self.link is not None:
            self.link.open(self)

    def send(self, message: dict[str, Any]) -> bool:
        return self.link.send(message) if self.link is not None else False

    def _addressed(self, message: dict[str, Any]) -> dict[str, Any]:
        """A command for the shown stop, naming it: with several passes paused, a command that
        arrives after that stop resumed is refused instead of resuming another pass."""
        stop = self._host().snapshot.stop
        if stop is not None and stop.stop is not None:
            message["stop"] = stop.stop
        return message

    def step(self) -> bool:
        return self.resume("step")

    def back(self, whole_pass: bool) -> bool:
        return False  # nothing re-runs: the app reviews what was recorded

    def other_pass(self, delta: int) -> bool:
        return False

    def resume(self, command: str) -> bool:
        if not self._host().paused():
            return False
        # before the send: the next stop may be read before send returns
        # progress is drawn seldom until the next stop
        self.reader.resumed(through=command != "step")
        return self.send(self._addressed({"cmd": command}))

    def jump(self, text: str) -> None:  # not offered: a script runs one way only
        pass

    def set_breakpoints(self, breakpoints: list[dict[str, Any]]) -> None:
        self.send({"cmd": "break", "breakpoints": list(breakpoints)})

    def console(self) -> bool:
        return self._host().paused()

    def evaluate(self, req: int, source: str, snapshot: Snapshot,
                 selected: int | None) -> bool | None:
        if not self._host().paused():
            return None
        return self.send(self._addressed({"cmd": "eval", "req": req, "source": source}))

    def cancel(self) -> bool:
        self.send({"cmd": "cancel"})
        self._host().notify("interrupting the console line", timeout=2)
        return True

    def interrupt(self) -> bool:
        host = self._host()
        if host.snapshot.exit is None and host.gone is None:
            self.send({"cmd": "interrupt"})
            host.notify("interrupt: stopping at the next node", timeout=2)
        return True

    def tensor(self, request: dict[str, Any]) -> bool:
        return self.send(self._addressed(request))

    def stdin(self) -> Any:
        return self.link

    def close(self, code: int | None) -> int | None:
        """The script's exit code once it has ended, else it is ended here (SIGTERM: 143, as
        a shell reports it)."""
        if self.link is not None:
            self.link.close()
            if code is None:
                status = self.link.returncode()
                code = 128 - status if status is not None and status < 0 else status
        return code

    def returncode(self) -> int | None:
        return self.link.returncode() if self.link is not None else None

    def history(self) -> tuple[PassView, ...]:
        return self.reader.model.ended

    def dropped(self) -> tuple[int, int]:
        return self.reader.model.dropped, self.reader.model.review_cap

    def flow_earlier(self) -> Sequence[PassView]:
        return self.history()

    def run_history(self) -> HistoryTable:
        """Every pass so far in brief; held in full: the passes a review can show (ended
        ones with a node recorded, and the pass shown)."""
        views = review.reviewable(self._host().snapshot, self.history())
        return self.reader.model.brief.table(
            v.number for k, v in enumerate(views) if v.executed() or k == len(views) - 1)

    def open_pass(self, number: int) -> bool:
        return False  # nothing re-runs: the app reviews the pass as it was recorded

