"""Every device-to-host read the engine makes for summaries and checks, counted in one place.

On a GPU each read of a device value (``.tolist()``, ``.item()``, ``float(t)``, ``.cpu()``) is a
host sync that stalls the stream. The engine bounds how many it makes per pass (one per summary
batch); routing them all through ``read`` / ``to_host`` makes that bound observable, and testable
on CPU where the same code runs with ``summary_device.FORCE`` on.
"""

from __future__ import annotations

from typing import Any

import torch

_total = [0]


def count() -> int:
    """Reads made so far by this process (take differences around a pass)."""
    return _total[0]


def _note() -> None:
    _total[0] += 1


def read(t: torch.Tensor) -> Any:
    """``t.tolist()`` (a Python scalar for a 0-d tensor): one transfer."""
    _note()
    return t.tolist()


def to_host(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a CPU tensor: one transfer (none is made for a CPU tensor, but it is counted, so
    that CPU tests of the device path see the transfers the GPU would make)."""
    _note()
    return t.cpu()


def wait(event: Any) -> None:
    """Block until a recorded event (a non-blocking copy) has completed: one sync."""
    _note()
    event.synchronize()
