"""Names people recognise for leaves: ``model.encoder.weight`` from module variables in the
calling frames, ``x`` from plain tensor variables, else ``leaf#7 (4, 10) float32``."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_BACKSTEP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MAX_FRAMES = 12
_CO_OPTIMIZED = 0x0001
_SNAPSHOT_LOCALS = sys.version_info < (3, 13)
_MAX_CONTAINER = 64


def is_internal(filename: str) -> bool:
    """Frames of torch, backstep and the import machinery are never the user's."""
    return (
        filename.startswith(_TORCH_DIR)
        or filename.startswith(_BACKSTEP_DIR)
        or filename.startswith("<frozen")
        or filename.endswith(os.sep + "runpy.py")
    )


def user_frame(start: Any = None) -> Any:
    """The innermost frame outside torch and backstep."""
    frame = start or sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def frame_source(frame: Any) -> dict[str, Any] | None:
    """{"file", "line", "code"} of the line a frame is executing."""
    if frame is None:
        return None
    import linecache

    path = os.path.abspath(frame.f_code.co_filename)
    line = frame.f_lineno or 0
    return {"file": path, "line": line, "code": linecache.getline(path, line).strip()}


def find_names(wanted: dict[int, Any], frame: Any) -> dict[int, str]:
    """Names for the tensors in ``wanted`` (id -> tensor) found in ``frame`` and its callers.

    Plain variables win over ``self`` attributes; the innermost frame wins over outer ones.
    """
    found: dict[int, str] = {}
    frames = []
    while frame is not None and len(frames) < _MAX_FRAMES:
        if not is_internal(frame.f_code.co_filename):
            frames.append(frame)
        frame = frame.f_back
    for prefer_self in (False, True):
        for f in frames:
            if len(found) == len(wanted):
                return found
            namespace = frame_locals(f)
            for var, value in namespace.items():
                if (var == "self") != prefer_self:
                    continue
                _name_value(var, value, wanted, found)
    return found


def frame_locals(frame: Any) -> dict[str, Any]:
    """A copy of a frame's variables that keeps nothing alive afterwards.

    Before Python 3.13, reading ``f_locals`` of a function frame leaves a snapshot dict on the
    frame that holds every local — even one the function later deletes — until the frame ends.
    So the snapshot is cleared again (it is a copy: the function's own variables are untouched).
    From 3.13 on ``f_locals`` is a live proxy, and clearing it would delete the variables.
    """
    try:
        namespace = frame.f_locals
        copy = dict(namespace)
    except Exception:  # noqa: BLE001 - a frame we cannot read has no names for us
        return {}
    if (
        _SNAPSHOT_LOCALS
        and frame.f_code.co_flags & _CO_OPTIMIZED
        and namespace is not frame.f_globals
        and type(namespace) is dict
    ):
        namespace.clear()
    return copy


def _name_value(var: str, value: Any, wanted: dict[int, Any], found: dict[int, str]) -> None:
    if isinstance(value, torch.Tensor):
        key = id(value)
        if key in wanted and key not in found:
            found[key] = var
    elif isinstance(value, torch.nn.Module):
        for qualname, param in value.named_parameters(remove_duplicate=False):
            key = id(param)
            if key in wanted and key not in found:
                found[key] = f"{var}.{qualname}"
    elif isinstance(value, (list, tuple)) and 0 < len(value) <= _MAX_CONTAINER:
        for k, item in enumerate(value):
            if isinstance(item, torch.Tensor):
                key = id(item)
                if key in wanted and key not in found:
                    found[key] = f"{var}[{k}]"
    elif isinstance(value, dict) and 0 < len(value) <= _MAX_CONTAINER:
        for k, item in value.items():
            if isinstance(item, torch.Tensor) and isinstance(k, (str, int)):
                key = id(item)
                if key in wanted and key not in found:
                    found[key] = f"{var}[{k!r}]"


def fallback_name(node_id: int, tensor: Any) -> str:
    """``leaf#7 (4, 10) float32`` for a leaf no variable names."""
    try:
        shape = tuple(tensor.shape)
        dtype = str(tensor.dtype).removeprefix("torch.")
        return f"leaf#{node_id} {shape} {dtype}".replace(",)", ")")
    except Exception:  # noqa: BLE001
        return f"leaf#{node_id}"
