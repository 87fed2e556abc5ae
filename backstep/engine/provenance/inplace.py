"""Remember which line bumped a tensor's version, without keeping the tensor alive.

Tensors compare elementwise, so a WeakKeyDictionary cannot hold them: entries are keyed by
``id()`` of the tensor's root base (views share their base's version counter, so a change through
any view is found from any other), with a weakref whose callback drops the entry.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

import torch

HISTORY_LIMIT = 16  # per tensor; an optimizer bumps every parameter on every step

_INPLACE_DUNDERS = frozenset(
    {
        "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
        "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
        "__imatmul__", "__setitem__",
    }
)  # fmt: skip

_Entry = tuple["weakref.ref[torch.Tensor]", deque]
_NO_SOURCE: dict[str, Any] = {}  # never written to
_history: dict[int, _Entry] = {}
# storage address -> key in _history: a saved output unpacks (``_raw_saved_result.data``) to a
# new tensor object over the same storage, so it is found by its storage.
_by_storage: dict[int, int] = {}
_lock = threading.Lock()
mutating_names: dict[Any, str | None] = {}  # func -> its name when the name says "mutates", else None


def mutating_name(func: Any, kwargs: dict[str, Any] | None) -> str | None:
    """The op name when ``func`` (called with ``kwargs``) may modify a tensor argument."""
    try:
        name = mutating_names[func]
    except KeyError:
        raw = getattr(func, "__name__", None) or ""
        name = (
            raw
            if (raw.endswith("_") and not raw.endswith("__")) or raw in _INPLACE_DUNDERS
            else None
        )
        mutating_names[func] = name
    except TypeError:  # unhashable callable
        return None
    if name is None and kwargs and (kwargs.get("out") is not None or kwargs.get("inplace") is True):
        name = getattr(func, "__name__", None) or "op"
    return name


def tensor_versions(
    args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> list[tuple[torch.Tensor, int]]:
    """(tensor, version) for each tensor among the call's arguments (one level into lists)."""
    found: list[tuple[torch.Tensor, int]] = []
    values = list(args)
    if kwargs:
        values.extend(kwargs.values())
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append((value, value._version))
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    found.append((item, item._version))
    return found


def _key_tensor(tensor: torch.Tensor) -> torch.Tensor:
    base = tensor._base
    return base if base is not None else tensor


def _storage_address(tensor: torch.Tensor) -> int:
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # sparse, meta, tensor subclasses without storage
        return 0


def _drop(key: int, ref: weakref.ref, address: int) -> None:
    entry = _history.get(key)
    if entry is not None and entry[0] is ref:
        _history.pop(key, None)
        if address and _by_storage.get(address) == key:
            _by_storage.pop(address, None)


def record(tensor: torch.Tensor, op: str, source: dict[str, Any] | None) -> None:
    """Note that ``op`` at ``source`` bumped ``tensor``'s version."""
    base = tensor._base
    target = base if base is not None else tensor
    key = id(target)
    item: dict[str, Any] = {"op": op, "file": None, "line": None, "code": None,
                            **(source or _NO_SOURCE), "version": tensor._version}
    entry = _history.get(key)
    if entry is None or entry[0]() is not target:
        with _lock:
            entry = _history.get(key)
            if entry is None or entry[0]() is not target:
                address = _storage_address(target)
                ref = weakref.ref(target, lambda r, k=key, a=address: _drop(k, r, a))
                entry = (ref, deque(maxlen=HISTORY_LIMIT))
                _history[key] = entry
                if address:
                    _by_storage[address] = key
    entry[1].append(item)


def history(tensor: torch.Tensor) -> list[dict[str, Any]]:
    """Recorded in-place modifications of ``tensor`` (or any view of its base, or another
    tensor object over the same storage), oldest first."""
    try:
        target = _key_tensor(tensor)
        entry = _history.get(id(target))
        if entry is None or entry[0]() is not target:
            address = _storage_address(target)
            key = _by_storage.get(address) if address else None
            entry = _history.get(key) if key is not None else None
            owner = entry[0]() if entry is not None else None
            if owner is None or _storage_address(owner) != address:
                return []
        return [dict(item) for item in list(entry[1])]
    except Exception:
        return []
