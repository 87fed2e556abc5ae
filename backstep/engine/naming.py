"""Names people recognise for leaves and modules, found in the variables of the calling frames.

A leaf is ``model.encoder.weight`` (a parameter of a module variable), ``x`` (a tensor
variable), else ``leaf#7 (4, 10) float32``; a module is named the same way (``model.encoder``),
so a module path and its parameters' leaf names agree wherever the model is called from.
Modules that no attribute path reaches are named by where they are held:
  registered submodule            ``model.encoder``       (``model.layers.2`` in a ModuleList)
  in a plain list or tuple        ``model.layers[2]``     (an attribute or a variable)
  in a plain dict (str/int keys)  ``model.heads['enc']``
Frames are searched innermost first, plain variables before ``self``, the first variable (in
definition order) that reaches the object names it; but plain containers of modules, in any
frame, come before all other variables: a layer is ``layers[2]`` even where a loop variable
``layer`` holds it for one iteration (and ``models[0]`` where ``G`` is also in ``[G, D]``).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from itertools import repeat
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
    return _INTERNAL[filename]


class _Internal(dict):  # type: ignore[type-arg]
    """filename -> is_internal's answer, worked out on first sight: every frame of the stack is
    asked about at every pass (subscripted, in one step)."""

    def __missing__(self, filename: str) -> bool:
        known = (
            filename.startswith(_TORCH_DIR)
            or filename.startswith(_BACKSTEP_DIR)
            or filename.startswith("<frozen")
            or filename.endswith(os.sep + "runpy.py")
        )
        if len(self) >= 4096:
            self.clear()
        self[filename] = known
        return known


_INTERNAL = _Internal()


def user_frame(start: Any = None) -> Any:
    """The innermost frame outside torch and backstep."""
    frame = start or sys._getframe(1)
    internal = _INTERNAL
    while frame is not None and internal[frame.f_code.co_filename]:
        frame = frame.f_back
    return frame


def frame_source(frame: Any) -> dict[str, Any] | None:
    """{"file", "line", "code"} of the line a frame is executing (a new dict each time).

    Every pass asks for its caller's: a line of a file named by its absolute path is looked up
    once, and again only when linecache has read the file anew (``checkcache`` after an edit).
    """
    if frame is None:
        return None
    import linecache

    name = frame.f_code.co_filename
    line = frame.f_lineno or 0
    hit = _LINES.get((name, line))
    if hit is not None:
        entry = linecache.cache.get(hit[0])
        if entry is not None and len(entry) == 4 and entry[2] is hit[2]:
            return {"file": hit[0], "line": line, "code": hit[1]}
    path = os.path.abspath(name)
    code = linecache.getline(path, line).strip()
    entry = linecache.cache.get(path)
    if os.path.isabs(name) and entry is not None and len(entry) == 4:
        if len(_LINES) >= 4096:
            _LINES.clear()
        _LINES[(name, line)] = (path, code, entry[2])
    return {"file": path, "line": line, "code": code}


# (file name, line) -> (absolute path, the line's text, the lines linecache read it from)
_LINES: dict[tuple[str, int], tuple[str, str, Any]] = {}


def find_names(wanted: dict[int, Any], frame: Any) -> dict[int, str]:
    """Names for the tensors in ``wanted`` (id -> tensor) found in ``frame`` and its callers.

    Plain variables win over ``self`` attributes; the innermost frame wins over outer ones,
    except that plain containers of modules come first (see the module docstring).
    """
    found: dict[int, str] = {}
    variables, owners = _variables(_user_frames(frame))
    count = len(wanted)
    tensor = torch.Tensor
    for var, value in variables:
        if len(found) == count:
            return found
        if isinstance(value, tensor):  # _name_value's first case, inline: most variables
            key = id(value)
            if key in wanted and key not in found:
                found[key] = var
        else:
            _name_value(var, value, wanted, found)
    for owner in owners:
        if len(found) == count:
            break
        if isinstance(owner, (torch.nn.Module, torch.Tensor)):
            _name_value("self", owner, wanted, found)
        else:  # a trainer's self.model: named by the attribute, as module_name does
            for attribute, held in _attributes(owner):
                _name_value(attribute, held, wanted, found)
    return found


def held_values(frame: Any) -> list[Any]:
    """What ``find_names`` looks through: the values of the variables of ``frame`` and its
    callers that can name anything (the items of plain containers too), then their ``self``
    objects."""
    variables, owners = _variables(_user_frames(frame))
    values = [value for _, value in variables]
    for _, value in variables:
        values += [item for _, item in container_items("", value)]
    return values + owners


def _variables(frames: list[Any]) -> tuple[list[tuple[str, Any]], list[Any]]:
    """The frames' plain variables in naming order, and their ``self`` objects (innermost
    first). Plain containers of modules, from any frame, come first: ``layers[1]`` names a
    layer for good, a loop variable ``layer`` (in the forward's frame) only for one iteration.
    Only variables that can name something are kept: a tensor, a module, a list, tuple or dict
    (what ``_name_value`` and ``_holds_modules`` look into, by the same ``isinstance``)."""
    held: list[tuple[str, Any]] = []
    rest: list[tuple[str, Any]] = []
    owners: list[Any] = []
    kind_of = _KINDS.get
    for f in frames:
        namespace = frame_locals(f)
        if "self" in namespace:
            owners.append(namespace.pop("self"))
        for var, value in namespace.items():
            kind = kind_of(type(value))
            if kind:  # a tensor
                rest.append((var, value))
            elif kind is not None:
                continue  # a number, a string, a module or function: names nothing here
            elif isinstance(value, _CONTAINERS):
                (held if _holds_modules(value) else rest).append((var, value))
            elif isinstance(value, _NAMING):
                rest.append((var, value))
            # else: a loader, a class, a plain object: _name_value finds nothing in it
    return held + rest, owners


# Exact types that are neither tensors, modules nor containers, and hold none (a script's
# imports, functions, counters and strings): every frame has many, and each pass reads them all.
_BARE = frozenset({type(None), bool, int, float, complex, str, bytes, range, type,
                   types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                   types.MethodType})


def _attributes(owner: Any) -> list[tuple[str, Any]]:
    """The attributes of a plain object (not too many), plain containers of modules first."""
    try:
        table = getattr(owner, "__dict__", None)
    except Exception:  # noqa: BLE001 - an object that will not say holds nothing for us
        return []
    if type(table) is not dict or len(table) > 4 * _MAX_CONTAINER:
        return []
    return _by_preference({k: v for k, v in table.items() if isinstance(k, str)})


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
        for qualname, param in module_parameters(value):
            key = id(param)
            if key in wanted and key not in found:
                found[key] = f"{var}.{qualname}"
    else:
        for label, item in container_items(var, value):
            if isinstance(item, torch.Tensor):
                key = id(item)
                if key in wanted and key not in found:
                    found[key] = label
            elif isinstance(item, torch.nn.Module):
                _name_value(label, item, wanted, found)


def container_items(label: str, value: Any) -> list[tuple[str, Any]]:
    """``[(label[0], item), ...]`` of a plain list or tuple, ``[(label['k'], item), ...]`` of a
    plain dict with str or int keys; [] for anything else (and for very long ones)."""
    if isinstance(value, (list, tuple)) and 0 < len(value) <= _MAX_CONTAINER:
        return [(f"{label}[{k}]", item) for k, item in enumerate(value)]
    if isinstance(value, dict) and 0 < len(value) <= _MAX_CONTAINER:
        return [(f"{label}[{k!r}]", item) for k, item in value.items()
                if isinstance(k, (str, int))]
    return []


_MODULE_ATTRIBUTES = frozenset(torch.nn.Module().__dict__)
_CONTAINERS = (list, tuple, dict)  # plain ones only: ModuleList and ModuleDict are registered
_NAMING = (torch.Tensor, torch.nn.Module)  # besides containers, what a variable names
# Tensor types that are no container to isinstance (no class of theirs overrides __class__ or
# __getattribute__, which isinstance would ask): most variables, told apart by type alone.
_TENSORS = frozenset(
    kind for kind in (torch.Tensor, torch.nn.Parameter)
    if not any("__class__" in vars(k) or "__getattribute__" in vars(k) for k in kind.__mro__[:-1]))
_KINDS = {**dict.fromkeys(_BARE, False), **dict.fromkeys(_TENSORS, True)}  # exact type -> kind
_SCANNED: dict[type, bool] = {}  # module class -> its instances' attributes are worth a look


def module_paths(root: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """``(path under root, module)`` for ``root`` itself (""), its registered submodules
    (``named_modules()``) and the modules held in plain lists, tuples and dicts among their
    attributes (``layers[2]``, ``heads['enc']``) and the submodules of those, each once."""
    seen: set[int] = set()
    pending: list[tuple[str, torch.nn.Module]] = [("", root)]
    while pending:
        prefix, top = pending.pop(0)
        for name, module in top.named_modules(prefix=prefix):
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            cls = type(module)
            scan = _SCANNED.get(cls)
            if scan is None:
                scan = _SCANNED[cls] = not cls.__module__.startswith("torch.")
            if not scan:  # torch's own modules keep theirs in ModuleLists
                continue
            for attribute, value in module.__dict__.items():
                if type(value) not in _CONTAINERS or attribute in _MODULE_ATTRIBUTES:
                    continue
                base = f"{name}.{attribute}" if name else attribute
                for label, item in container_items(base, value):
                    if isinstance(item, torch.nn.Module) and id(item) not in seen:
                        pending.append((label, item))


def module_parameters(root: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """``(path, parameter)`` for every parameter of the modules ``module_paths`` finds (a
    parameter shared by two modules comes once per module)."""
    for path, module in module_paths(root):
        for name, param in module._parameters.items():
            if param is not None:
                yield (f"{path}.{name}" if path else name), param


def module_name(module: torch.nn.Module, frame: Any) -> str | None:
    """The name ``module`` has in ``frame`` and its callers, as ``find_names`` would name its
    parameters (``model.encoder``, ``layers[2]``); for an attribute of a ``self`` that is no
    module path (a trainer's ``self.net``), the attribute's name; else None."""
    variables, owners = _variables(_user_frames(frame))
    for var, value in variables:
        name = _module_in(var, value, module)
        if name is not None:
            return name
    for owner in owners:
        if owner is module:
            continue
        registered = owner._modules if isinstance(owner, torch.nn.Module) else {}
        attributes = [*registered.items(),
                      *((k, v) for k, v in _attributes(owner) if k not in _MODULE_ATTRIBUTES)]
        for var, value in attributes:
            name = _module_in(var, value, module)
            if name is not None:
                return name
    return None


def _module_in(var: str, value: Any, module: torch.nn.Module) -> str | None:
    """``var``'s path to ``module`` when ``value`` is it, holds it, or lists it; else None."""
    if value is module:
        return var
    if isinstance(value, torch.nn.Module):
        for path, inner in module_paths(value):
            if inner is module:
                return f"{var}.{path}"
        return None
    for label, item in container_items(var, value):
        if item is module:
            return label
    return None


def _by_preference(namespace: dict[str, Any]) -> list[tuple[str, Any]]:
    """An object's attributes, plain containers of modules first (as ``_variables``)."""
    items = list(namespace.items())
    first = [item for item in items if _holds_modules(item[1])]
    if not first:
        return items
    return first + [item for item in items if not any(item is f for f in first)]


def _holds_modules(value: Any) -> bool:
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return False
    # isinstance over the items without a generator's frame each (every pass, every container)
    return len(value) <= _MAX_CONTAINER and any(map(isinstance, value, repeat(torch.nn.Module)))


def _user_frames(frame: Any) -> list[Any]:
    """``frame`` and its callers outside torch and backstep, innermost first (at most 12)."""
    frames: list[Any] = []
    internal = _INTERNAL
    while frame is not None:
        if not internal[frame.f_code.co_filename]:
            frames.append(frame)
            if len(frames) == _MAX_FRAMES:
                break
        frame = frame.f_back
    return frames


def fallback_name(node_id: int, tensor: Any) -> str:
    """``leaf#7 (4, 10) float32`` for a leaf no variable names."""
    try:
        shape = tuple(tensor.shape)
        dtype = str(tensor.dtype).removeprefix("torch.")
        return f"leaf#{node_id} {shape} {dtype}".replace(",)", ")")
    except Exception:  # noqa: BLE001
        return f"leaf#{node_id}"
