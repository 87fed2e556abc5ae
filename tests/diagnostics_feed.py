"""Feeding recorded passes to a Diagnostician, event by event or in batches."""

from __future__ import annotations

from typing import Any

from backstep.engine.diagnostics import Diagnostician


def feed(doctor: Diagnostician, passes: Any, batched: bool) -> None:
    """Each pass's begin, its events (in one ``emit_many`` when ``batched``) and its end."""
    for begin, batch, end in passes:
        doctor.emit(begin)
        if batched:
            doctor.emit_many(batch)
        else:
            for event in batch:
                doctor.emit(event)
        doctor.emit(end)
