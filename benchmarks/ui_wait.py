"""Waiting for the app in the UI benchmarks: poll every half millisecond, never spin.

A loop of ``asyncio.sleep(0)`` runs its check between every two of the app's own callbacks on
the one event loop, so it measured its own polling into every key: 4-6 ms of a 40 ms pass
switch in ``bench_replay.py``. A check every ``POLL`` seconds leaves the loop to the app and
overstates a latency by at most ``POLL``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

POLL = 0.0005


async def until(ready: Callable[[], object], timeout: float = 120.0) -> None:
    """Return once ``ready()`` is true; TimeoutError after ``timeout`` seconds."""
    end = time.perf_counter() + timeout
    while not ready():
        if time.perf_counter() > end:
            raise TimeoutError("the UI never caught up")
        await asyncio.sleep(POLL)
