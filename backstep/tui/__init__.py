"""The stepping UI (Textual). Never imports torch, not even indirectly.

``app.py`` is the one app (the panels, every key's binding, the view's keys) over a ``Driver``:
``runtime/live_driver.py`` for a script (``backstep run``, ``attach()``, ``connect``),
``runtime/replay_driver.py`` for a trace (``show``). A new panel goes in ``panels/``, a new key
in ``BackstepApp.BINDINGS`` (what it does on the app, or on the drivers if it moves the
session), a new piece of state in ``state/`` (plain Python, no textual). ``widgets/`` holds
reusable widgets, ``text/`` how things read on screen, ``runtime/`` what runs around the app
(the drivers, the link to the debuggee, its reader thread, signals, the terminal).
"""

from __future__ import annotations

from backstep.tui.app import BackstepApp
from backstep.tui.runtime.link import Link

__all__ = ["BackstepApp", "Link"]
