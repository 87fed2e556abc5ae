"""The trips of a ``trace --when`` and the tensors file each names (``--tensors``), as ``show``
says them. A ``trip`` event names its file relative to the trace's folder
(``run.tensors/trip-1-pass-3001.pt``); it is found there, never outside it (a trace is hostile
input: an absolute name or one with ``..`` is refused, not followed). Stdlib only.
"""

from __future__ import annotations

import os
from typing import Any

# what show's console offers to run (statements show nothing: the dict is t, then read)
LOAD = "import torch; t = torch.load(trip_tensors, weights_only=True)"


def tensors_path(trace_path: str, name: Any) -> tuple[str | None, str | None]:
    """(the file's absolute path, None) for a trip's ``tensors``; (None, why) when it names
    none, names one outside the trace's folder, or the file is not there."""
    if not isinstance(name, str) or not name:
        return None, None
    if "\\" in name or "\x00" in name or os.path.isabs(name) or \
            ".." in name.split("/"):
        return None, "is outside the trace's folder (not read)"
    path = os.path.join(os.path.dirname(os.path.abspath(trace_path)), os.path.normpath(name))
    if not os.path.isfile(path):
        return None, f"{path} is not there (moved or deleted?)"
    return path, None


def trip_words(trip: dict[str, Any], trace_path: str) -> list[str]:
    """A line each: which trip this pass is and where it tripped; where its tensors are, and
    how to load them (kept apart: the path is the one to read whole, in a narrow console)."""
    where = f"{trip.get('name') or '?'} #{trip.get('id')}"
    detail = trip.get("detail") or trip.get("reason")
    text = f"pass {trip.get('n')}: --when trip {trip.get('trip')} at {where}"
    if detail:
        text += f" ({detail})"
    path, why = tensors_path(trace_path, trip.get("tensors"))
    if path is not None:
        return [text, f"its tensors: {path}",
                f"in the console: {LOAD}, then t['grad_inputs'], t['saved'], ..."]
    if why is not None:
        return [text, f"its tensors file {why}"]
    return [text]
