"""What backstep does in a forked child of the process it debugs: let go of everything.

A DataLoader worker, a ``multiprocessing`` fork or a bare ``os.fork()`` inherits the parent's
session: patched ``os._exit``, hooks, the UI's socket, the trace file. Left alone, a worker that
exits announces the script's exit, a backward in it pauses forever, and closing the socket shuts
the parent's connection down. Whoever arms backstep registers a callback here; in the child
(``os.register_at_fork(after_in_child=...)``) every callback runs once, and they must not emit,
flush, shut a socket down or take a lock: a thread of the parent may have held it at fork time,
and that thread does not exist in the child. Stdlib only, no torch.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

_callbacks: dict[int, Callable[[], None]] = {}
_next = 0
_registered = False
_kept: list[Any] = []  # objects a child abandons but must never finalize (see ``keep``)
_lock = threading.Lock()


def on_fork_child(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` in every forked child (until the returned remover is called)."""
    global _next, _registered
    with _lock:
        if not _registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_in_child)
            _registered = True
        key = _next
        _next += 1
        _callbacks[key] = callback

    def remove() -> None:
        _callbacks.pop(key, None)

    return remove


def keep(obj: Any) -> None:
    """Hold ``obj`` for the child's whole life: an inherited buffered file whose lock another
    thread held at fork time would wait on it forever when finalized."""
    _kept.append(obj)


def _after_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the parent may have held it while registering
    callbacks = list(_callbacks.values())
    _callbacks.clear()
    for callback in callbacks:
        try:
            callback()
        except BaseException:  # noqa: BLE001, S110 - a fork must never fail because of us
            pass


def abandon_file(stream: Any) -> None:
    """Close an inherited buffered file at the raw level: no flush (the parent's pending bytes
    would be written twice), no buffer lock; its finalizer then sees it closed and does
    nothing."""
    keep(stream)
    raw = getattr(stream, "raw", None)
    try:
        (raw if raw is not None else stream).close()
    except Exception:  # noqa: BLE001, S110
        pass


def in_multiprocessing_child() -> bool:
    """Whether this is a multiprocessing child (a spawned DataLoader worker importing the
    script's top level, where ``attach()`` may sit): the debugger is its parent's."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return False
    try:
        return bool(getattr(mp.current_process(), "_inheriting", False)
                    or mp.parent_process() is not None)
    except Exception:  # noqa: BLE001
        return False
