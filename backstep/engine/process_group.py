"""Say, once, that passes run under a torch.distributed process group, and which.

A script calls ``init_process_group`` long after the ``session`` event, so the group is looked
for when a pass begins: the first ``pass_begin`` that finds the default group initialized is
preceded by one ``process_group`` event (backend, rank, world size, collective timeout). A
paused rank holds up the others' collectives; the UI uses this to say for how long they wait.
``torch.distributed`` is only read if the script imported it (it never is imported here).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from backstep.engine.recorder import Sink, emit_all


def describe() -> dict[str, Any] | None:
    """The ``process_group`` event for the default group, or None when there is none."""
    if not _initialized():
        return None
    dist = sys.modules["torch.distributed"]
    try:
        return {
            "event": "process_group",
            "backend": str(dist.get_backend()),
            "rank": int(dist.get_rank()),
            "world_size": int(dist.get_world_size()),
            "timeout": _timeout(dist),
        }
    except Exception:  # noqa: BLE001 - a group being torn down must never break the script
        return None


def _initialized() -> bool:
    """Whether a default process group may be up (``describe`` may find one)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist is not None and dist.is_available() and dist.is_initialized()
    except Exception:  # noqa: BLE001 - as ``describe``: look the slow way
        return True


def _timeout(dist: Any) -> float | None:
    """The default group's collective timeout in seconds: the longest of its backends' (one
    per device type: gloo on CPU, NCCL on CUDA); None if torch does not say."""
    try:
        group = dist.distributed_c10d._get_default_group()
        found = [getattr(getattr(group._get_backend(device), "options", None), "_timeout", None)
                 for device in group._device_types]
        seconds = [t.total_seconds() for t in found if t is not None]
        return float(max(seconds)) if seconds else None
    except Exception:  # noqa: BLE001 - private names: best effort, never an error
        return None


class GroupNotice:
    """A Sink wrapper: events pass through; the first ``pass_begin`` under an initialized
    default group is preceded by its ``process_group`` event."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.announced = False
        self._lock = threading.Lock()

    def emit(self, event: dict[str, Any]) -> None:
        if not self.announced and event.get("event") == "pass_begin":
            with self._lock:
                group = None if self.announced else describe()
                if group is not None:
                    self.announced = True
                    self.inner.emit(group)
        self.inner.emit(event)

    def emit_many(self, events: list[dict[str, Any]]) -> None:
        # without torch.distributed in use (most scripts) there is nothing to announce: the
        # batch goes on as it is, unread (a recorded pass's node events, every flush)
        if (not self.announced and _initialized()
                and any(e.get("event") == "pass_begin" for e in events)):
            for event in events:
                self.emit(event)
        else:
            emit_all(self.inner, events)

    def flush(self) -> None:
        self.inner.flush()
