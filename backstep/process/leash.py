"""A UI that the browser server (``process.serve``) started ends when that server is gone.

textual-serve runs one UI process per browser connection, on pipes. If the server dies
without ending them (``kill -9``, out of memory), Textual's web driver stops reading at end of
file but the app runs on, drawing into a pipe no one reads: an orphan found spinning at 74% CPU
half an hour later. The server names itself in ``BACKSTEP_SERVED_BY`` (its pid); here a daemon
thread looks twice a second whether this process's parent is still that one, and ends the
process at once when not (a served UI holds nothing to save: its trace is read-only, a
``connect`` leaves the script running). SIGTERM ends it at once too: Textual's web driver
takes SIGTERM into its event loop, which a UI busy drawing a huge pass never gets back to, so
here SIGTERM is blocked in every thread and one of ours waits for it (``sigwait``). Stdlib only.
"""

from __future__ import annotations

import os
import signal
import threading
import time

ENV_SERVED_BY = "BACKSTEP_SERVED_BY"
EVERY = 0.5  # seconds between looks
GONE = 129  # the status of a process whose terminal hung up (128 + SIGHUP)


def hold() -> bool:
    """Start the watch if the server started this process (and hide the variable from what
    this process starts); True if it did."""
    text = os.environ.pop(ENV_SERVED_BY, "")
    try:
        server = int(text)
    except ValueError:
        return False
    if os.getppid() != server:  # gone already, before we looked
        os._exit(GONE)
    if hasattr(signal, "pthread_sigmask"):  # before any other thread starts: they inherit it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_on_term, name="backstep-sigterm", daemon=True).start()
    threading.Thread(target=_watch, args=(server,), name="backstep-leash", daemon=True).start()
    return True


def _on_term() -> None:
    signal.sigwait({signal.SIGTERM})
    os._exit(128 + signal.SIGTERM)


def _watch(server: int) -> None:
    while os.getppid() == server:
        time.sleep(EVERY)
    os._exit(GONE)
