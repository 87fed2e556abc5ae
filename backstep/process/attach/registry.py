"""The one attachment of this process and the lock around it: ``attach()`` sets it, and an
attachment's fork handler clears it in a forked child (a module of its own, so that neither
needs to import the other)."""

from __future__ import annotations

import threading
from typing import Any

lock = threading.RLock()
current: Any = None  # the base.Attachment armed (or last armed) by attach()
torch_warned = False  # a torch backstep cannot use is named once, however often attach() runs


def forget_after_fork() -> None:
    """In a forked child: a fresh lock (a parent thread may have held it at fork time) and no
    attachment, so that a later attach() starts afresh."""
    global lock, current
    lock = threading.RLock()
    current = None
