"""What the module tracker keeps per thread, and its small helpers.

``_Entry`` is one running forward, ``_Watch`` an in-place library module inside a paused region;
``_Stack`` holds them, innermost last. The helpers read and change the thread's torch-function
mode stack and name root modules from the caller's variables (``modules`` uses them all).
"""


from __future__ import annotations

import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch._C._autograd import _get_sequence_nr

from backstep.engine.provenance.frames import (
    _UNSET,
)
from backstep.engine.provenance.inplace import record, tensor_versions
from backstep.engine.provenance.scopes import (
    SOURCE_KEY,
    Region,
    _ModuleMap,
)


class _Entry:
    """One running forward: the module, its dotted path, and the root entry it is named from."""

    __slots__ = (
        "module", "key", "path", "origin", "rebuilt", "resume", "frame", "source", "table",
        "region", "pushes",
    )  # fmt: skip

    def __init__(self, module: nn.Module, path: str, origin: _Entry | None = None) -> None:
        self.module = module
        self.key = id(module)
        self.path = path
        self.frame: FrameType | None = None  # its module call's frame, while it runs
        self.source: Any = _UNSET  # cache for find_source()
        self.origin: _Entry = origin if origin is not None else self  # names via named_modules()
        self.rebuilt = False  # the origin's module map was rebuilt during this call
        self.table: _ModuleMap | None = None  # the origin's module map, fetched once per call
        self.resume: Callable[[], None] | None = None  # run when this forward ends
        self.region: Region | None = None  # the paused region a user module runs inside
        # the mode while it runs: on (True: it pushed it back), off (False: it paused it), or
        # None: as around it
        self.pushes: bool | None = None


class _Stack(threading.local):
    def __init__(self) -> None:
        self.entries: list[Any] = []  # _Entry, Region and _Watch objects, innermost last
        self.region: Region | None = None  # entries[-1] when it is a Region


_grad_enabled = torch.is_grad_enabled
_stack_depth = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at


# Modules whose eval fast path is skipped when a torch-function mode is active.
_FAST_PATH_TYPES = (nn.TransformerEncoder, nn.TransformerEncoderLayer, nn.MultiheadAttention)


def _fast_path_possible(module: nn.Module, args: Any) -> bool:
    """True for an eval-mode transformer module that will record no graph (its fast path may
    run, and must run exactly as it would without backstep)."""
    if module.training or not isinstance(module, _FAST_PATH_TYPES):
        return False
    if any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return False
    return not any(p.requires_grad for p in module.parameters())


def _on_top(mode: Any) -> bool:
    """``mode`` is the innermost torch-function mode of this thread."""
    depth = _stack_depth()
    return depth > 0 and _stack_at(depth - 1) is mode


def _on_stack(mode: Any) -> bool:
    """``mode`` is on this thread's torch-function stack."""
    return any(_stack_at(i) is mode for i in range(_stack_depth()))


def _call_frame(entry: Any) -> FrameType | None:
    """A frame of ``entry``'s module call (among the callers of anything it runs), or None."""
    if type(entry) is Region:
        return entry.caller
    if type(entry) is _Watch:
        return entry.region.caller
    return entry.frame


_graph_task = getattr(torch._C, "_current_graph_task_id", None)
_autograd_node = getattr(torch._C, "_current_autograd_node", None)


def _rerun(mode: Any) -> bool:
    """A root forward that should get ``mode`` pushed: one a backward runs (reentrant
    checkpoint's recompute, inside CheckpointFunctionBackward). A backward called through the
    mode runs inside its handler, where torch has taken it off the stack, so without this the
    re-run forward would record no line and no module."""
    return (
        _graph_task is not None
        and mode is not None
        and mode.enabled
        and _graph_task() != -1
        and not _on_stack(mode)
    )


def _rerun_source() -> Any:
    """Source of the node whose backward re-runs a forward (the ``checkpoint(...)`` line)."""
    try:
        node = _autograd_node() if _autograd_node is not None else None
        return node.metadata.get(SOURCE_KEY) if node is not None else None
    except Exception:
        return None


def _push_back(mode: Any) -> Callable[[], None]:
    """Push ``mode`` (a user module's forward inside a paused region); returns the undo."""
    torch._C._push_on_torch_function_stack(mode)

    def pop() -> None:
        if _on_top(mode):
            torch._C._pop_torch_function_stack()

    return pop


def _note_inplace(
    versions: list[tuple[torch.Tensor, int]], module: nn.Module | None, source: Any
) -> list[torch.Tensor]:
    """Record the arguments whose version moved during the module's call."""
    changed: list[torch.Tensor] = []
    name = type(module).__name__ if module is not None else "module"
    for tensor, version in versions:
        if tensor._version != version and not any(t is tensor for t in changed):
            record(tensor, name, source)
            changed.append(tensor)
    return changed


class _Watch:
    """An inner library module built with ``inplace=True`` while it runs in a region: its
    arguments' versions, checked when it returns."""

    __slots__ = ("region", "key", "versions")

    path = property(lambda self: self.region.path)  # type: ignore[misc]
    origin = property(lambda self: self.region.origin)  # type: ignore[misc]
    frame = None
    pushes = None

    def __init__(self, region: Region, module: nn.Module, args: Any) -> None:
        self.region = region
        self.key = id(module)
        self.versions = tensor_versions(args, None)

    def close(self, module: nn.Module | None) -> None:
        versions, self.versions = self.versions, []
        region = self.region
        region.log.append(~_get_sequence_nr())
        _note_inplace(versions, module, region.source)
