"""End the UI cleanly on SIGHUP or SIGTERM (the terminal closed, or someone ended us).

The app is asked to exit from its own event loop, as ``q`` would: Textual restores the
terminal, then the command's own cleanup (ending the debuggee) runs. Raising SystemExit from
the handler instead lands wherever the main thread happens to be, inside asyncio's or Textual's
machinery, where it can be swallowed or leave Textual's teardown waiting. A signal that comes
while no event loop runs (the app starting, or already ended) still ends the process at once
with SystemExit(128 + signal), as a shell reports a death by signal.
"""

from __future__ import annotations

import asyncio
import signal
from types import TracebackType
from typing import Protocol

SIGNALS = (signal.SIGHUP, signal.SIGTERM)


class Exitable(Protocol):
    def exit(self) -> None: ...


class HangUp:
    """A context that routes SIGHUP and SIGTERM to ``app.exit()``; ``code`` is then the exit
    code a death by that signal gives (None: no signal came)."""

    def __init__(self, app: Exitable) -> None:
        self.app = app
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum

    def __enter__(self) -> HangUp:
        for sig in SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise SystemExit(128 + signum) from None
        if self.signum is None:
            self.signum = signum
        loop.call_soon_threadsafe(self.app.exit)
