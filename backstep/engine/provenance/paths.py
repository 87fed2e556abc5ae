"""The dotted path of a module whose forward starts: from the running root's module map, or,
for a root, from the variables that hold it (``naming.module_name``)."""

from __future__ import annotations

import weakref
from types import FrameType
from typing import Any

from torch import nn

from backstep.engine.naming import module_name, module_paths
from backstep.engine.provenance.frames import user_frame
from backstep.engine.provenance.scopes import TABLES

# (id(module), id(code), f_lasti) of a root call -> (the module, the variable naming it there);
# shared by the trackers (a re-installed Provenance names its first forward without a lookup)
_ROOT_NAMES: dict[tuple[int, int, int], tuple[weakref.ref[nn.Module], str | None]] = {}
# (module class, id(code), f_lasti) of call sites where a module of that class had no name
_ANONYMOUS: set[tuple[type, int, int]] = set()


def root_name(module: nn.Module, frame: FrameType | None) -> str | None:
    """``naming.module_name`` from the user frame that called a root module, remembered per
    module and call site (reading a frame's variables copies them all: a script's
    module-level globals, on every forward)."""
    if frame is None:
        return None
    site = (id(frame.f_code), frame.f_lasti)
    key = (id(module), *site)
    hit = _ROOT_NAMES.get(key)
    if hit is not None and hit[0]() is module:
        return hit[1]
    anonymous = (type(module), *site)
    if anonymous in _ANONYMOUS:  # a module made at each call (``nn.ReLU()(x)``): no variable
        return None
    name = module_name(module, frame)
    if len(_ROOT_NAMES) >= 1024:
        _ROOT_NAMES.clear()
        _ANONYMOUS.clear()
    _ROOT_NAMES[key] = (weakref.ref(module), name)
    if name is None:
        _ANONYMOUS.add(anonymous)
    return name


def place(module: nn.Module, entries: list[Any], caller: FrameType | None) -> tuple[str, Any]:
    """(dotted path, the origin entry it is named from; None: a new root). ``entries`` is the
    thread's running-module stack; ``caller`` the module call's frame."""
    if not entries:
        name = root_name(module, user_frame(caller))
        return name or type(module).__name__, None
    top = entries[-1]
    origin = top.origin
    relative = _relative(origin, module)
    if relative is None:  # not reachable from the root: a new root below ``top``
        name = root_name(module, user_frame(caller))
        return f"{top.path}.{name or type(module).__name__}", None
    return (f"{origin.path}.{relative}" if relative else origin.path), origin


def _relative(origin: Any, module: nn.Module) -> str | None:
    """``module``'s path relative to ``origin.module`` ("" for itself), or None. The root's
    module map is fetched once per call of it, and rebuilt at most once."""
    root = origin.module
    table = origin.table
    if table is None:
        table = origin.table = TABLES.get(root)
    if table is not None:
        hit = table.get(id(module))
        if hit is not None and hit[0]() is module:
            return hit[1]  # None: known not to be reachable from this root
        if origin.rebuilt:
            return None
    origin.rebuilt = True
    table = {id(m): (weakref.ref(m), name) for name, m in module_paths(root)}
    hit = table.get(id(module))
    if hit is None:
        table[id(module)] = (weakref.ref(module), None)
    TABLES[root] = origin.table = table
    return hit[1] if hit is not None else None
