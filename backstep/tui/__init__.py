"""The live stepping UI (Textual). Never imports torch, not even indirectly.

``live_app.py`` (``backstep run``, ``attach()``, ``connect``) and ``replay_app.py`` (``show``)
compose the panels; a new panel goes in ``panels/``, what a new key does in ``actions/`` (its
binding in ``live_app.py``), a new piece of state in ``state/`` (plain Python, no textual).
``widgets/`` holds reusable widgets, ``text/`` how things read on screen, ``runtime/`` what runs
around the app (the link to the debuggee, its reader thread, signals, the terminal).
"""

from __future__ import annotations

from backstep.tui.live_app import BackstepApp
from backstep.tui.runtime.link import Link

__all__ = ["BackstepApp", "Link"]
