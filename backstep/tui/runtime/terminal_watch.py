"""Notice a terminal that went away without a SIGHUP.

A UI that is not its terminal's session leader's foreground (under torchrun the ranks run in
sessions of their own, with no controlling terminal) gets no SIGHUP when the terminal closes, and
Textual's input thread then reads end-of-file in a loop forever. A hung-up tty answers
``tcgetattr`` with EIO, so polling that once a second is enough to end the UI as a hangup would.
"""

from __future__ import annotations

import os
import signal
import termios
from collections.abc import Callable


def terminal_gone(fd: int) -> bool:
    """True once the tty on ``fd`` has hung up (False for a live tty or for what is not a tty)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args) and exc.args[0] == 5  # EIO: hung up; ENOTTY: not a terminal
    except (OSError, ValueError):
        return False
    return False


def end_if_gone(fd: int, cleanup: Callable[[], object] | None = None) -> None:
    """End this process as a hangup would (exit code 129) once the terminal is gone. There is
    nothing left to restore, and Textual's own teardown would wait on its input thread, which
    spins on end-of-file; so ``cleanup`` (ending the debuggee) runs, then the process exits."""
    if not terminal_gone(fd):
        return
    try:
        if cleanup is not None:
            cleanup()
    finally:
        os._exit(128 + signal.SIGHUP)
