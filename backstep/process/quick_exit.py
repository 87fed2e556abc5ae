"""Ending a process without the interpreter's teardown, once nothing is left to do.

With a big model in memory (the debuggee's graphs and torch, the UI's record of a 6,380-node
pass), Python's teardown frees it object by object: seconds, spent after the person pressed
``q`` and waited on. ``atexit`` handlers still run and output is flushed first.
"""

from __future__ import annotations

import atexit
import os
import sys


def end_process(code: int) -> None:
    """Run the ``atexit`` handlers, flush stdout and stderr, and end with ``code`` at once."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream: nothing left to flush
            pass
    os._exit(code)
