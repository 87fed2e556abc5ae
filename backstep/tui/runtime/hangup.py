"""End the UI cleanly on SIGHUP or SIGTERM (the terminal closed, or someone ended us).

The app is asked to exit from its own event loop, as ``q`` would: Textual restores the
terminal, then the command's own cleanup (ending the debuggee) runs. Raising SystemExit from
the handler instead lands wherever the main thread happens to be, inside asyncio's or Textual's
machinery, where it can be swallowed or leave Textual's teardown waiting. A signal that comes
while no event loop runs (the app starting, or already ended) still ends the process at once
with SystemExit(128 + signal), as a shell reports a death by signal. An app too busy to
get to its exit (drawing a huge pass) still ends: ``GRACE`` seconds after the signal the
terminal's modes are put back and the process ends with 128 + signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from types import TracebackType
from typing import Protocol

SIGNALS = (signal.SIGHUP, signal.SIGTERM)
GRACE = 3.0  # seconds an app has to exit on its own after a signal
# what Textual turns on, off again: alternate screen, mouse, paste, focus, keyboard, cursor
RESET = ("\x1b[?1049l\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?1004l"
         "\x1b[<u\x1b[?7h\x1b[?25h")


class Exitable(Protocol):
    def exit(self) -> None: ...


class HangUp:
    """A context that routes SIGHUP and SIGTERM to ``app.exit()``; ``code`` is then the exit
    code a death by that signal gives (None: no signal came)."""

    def __init__(self, app: Exitable) -> None:
        self.app = app
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._timer: threading.Timer | None = None
        self._modes: list | None = None

    @property
    def code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum

    def __enter__(self) -> HangUp:
        with contextlib.suppress(Exception):  # the terminal as it is before the app starts
            import termios

            self._modes = termios.tcgetattr(sys.__stdin__.fileno())
        for sig in SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:  # the app ended in time: the rest is the command's
            self._timer.cancel()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise SystemExit(128 + signum) from None
        if self.signum is None:
            self.signum = signum
            self._timer = threading.Timer(GRACE, self._force, (signum, loop))
            self._timer.daemon = True
            self._timer.start()
        loop.call_soon_threadsafe(self.app.exit)

    def _force(self, signum: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """The app did not end: put the terminal back and end the process now. Not once its
        loop is over: the command's own cleanup (ending a debuggee) is running then."""
        if loop is not None and not loop.is_running():
            return
        with contextlib.suppress(Exception):
            stream = sys.__stderr__
            if stream is not None and stream.isatty():
                os.write(stream.fileno(), RESET.encode())
        with contextlib.suppress(Exception):
            if self._modes is not None:
                import termios

                termios.tcsetattr(sys.__stdin__.fileno(), termios.TCSADRAIN, self._modes)
        os._exit(128 + signum)
