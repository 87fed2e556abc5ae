"""What the torch running the tests can do, for tests whose answer depends on it: on a torch
without ``SavedTensor.data`` (2.4 to 2.9) every saved tensor's status is ``unknown``."""

from __future__ import annotations

import pytest

from backstep.engine import saved


def seen(status: str) -> str:
    """The status a saved tensor shows on this torch: ``status``, or ``unknown`` without .data."""
    return status if saved.SAVED_DATA else "unknown"


needs_saved_data = pytest.mark.skipif(
    not saved.SAVED_DATA,
    reason="this torch has no SavedTensor.data: saved tensors' status and versions are unknown")
