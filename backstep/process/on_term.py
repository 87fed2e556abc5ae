"""A trace survives SIGTERM (a job scheduler's kill, ``timeout``): where the signal would end
the process outright (its default disposition, set in the main thread), it first writes the
``exit`` event and closes the trace, then ends the process by the same signal, so its exit
status is the one plain python's would be. A script that handles SIGTERM itself is left alone.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any


def close_on_sigterm(close: Callable[[], None], wait: float = 5.0) -> Callable[[], None]:
    """Run ``close`` on SIGTERM, then die of it; returns what undoes this (a no-op where
    nothing was installed). ``close`` runs on a thread of its own, waited for ``wait`` seconds:
    the signal may have come while this thread held the recorder's lock."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return lambda: None
    except (AttributeError, ValueError):
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        closing = threading.Thread(target=_quietly, args=(close,), daemon=True,
                                   name="backstep-sigterm")
        closing.start()
        closing.join(wait)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)

    def undo() -> None:
        try:
            if signal.getsignal(signal.SIGTERM) is handler:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:
            pass

    return undo


def _quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:  # noqa: BLE001, S110 - dying anyway: the file is what it is
        pass
