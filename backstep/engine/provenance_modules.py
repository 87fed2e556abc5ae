"""Track which nn.Module's forward is running, as a dotted path, per thread.

Global forward pre/post hooks keep a per-thread stack. A root module (called with nothing on the
stack) is named by the variable that holds it in the user's frame (``model``), else by its class;
nested modules get their path from the root's ``named_modules()`` (cached, rebuilt at most once per
root call when a module is missing), so ``model.encoder.layers.3.self_attn`` comes out whether
the call went through a ModuleList or not.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from backstep.engine import provenance_cuts
from backstep.engine.naming import frame_locals
from backstep.engine.provenance_frames import _UNSET, call_impl_frame, find_source, user_frame

_ModuleMap = dict[int, tuple["weakref.ref[nn.Module]", str | None]]


class _Entry:
    """One running forward: the module, its dotted path, and the root entry it is named from."""

    __slots__ = ("module", "path", "origin", "rebuilt", "resume", "frame", "source", "table")

    def __init__(self, module: nn.Module, path: str, origin: _Entry | None = None) -> None:
        self.module = module
        self.path = path
        self.frame: FrameType | None = None  # its Module._call_impl frame, while it runs
        self.source: Any = _UNSET  # cache for find_source()
        self.origin: _Entry = origin if origin is not None else self  # names via named_modules()
        self.rebuilt = False  # the origin's module map was rebuilt during this call
        self.table: _ModuleMap | None = None  # the origin's module map, fetched once per call
        self.resume: Callable[[], None] | None = None  # run when this forward ends


class _Stack(threading.local):
    def __init__(self) -> None:
        self.entries: list[_Entry] = []


def _variable_name(module: nn.Module, frame: FrameType | None) -> str | None:
    """Name of a local (or an attribute of ``self``) in ``frame`` that holds ``module``."""
    if frame is None:
        return None
    local_vars = frame_locals(frame)  # a plain f_locals read would keep the caller's locals alive
    for name, value in local_vars.items():
        if value is module:
            return name
    owner = local_vars.get("self")
    if owner is not None:
        for table in (getattr(owner, "__dict__", None), getattr(owner, "_modules", None)):
            if isinstance(table, dict):
                for name, value in table.items():
                    if value is module:
                        return name
    return None


_compiling = torch.compiler.is_compiling


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


class ModuleTracker:
    """Global module forward hooks maintaining the per-thread module-path stack."""

    def __init__(self) -> None:
        self._stack = _Stack()
        self._maps: weakref.WeakKeyDictionary[nn.Module, _ModuleMap] = weakref.WeakKeyDictionary()
        self._handles: list[RemovableHandle] = []
        # Called at each forward's start with no grad; returns a callable undoing what it did.
        self.on_no_grad: Callable[[], Callable[[], None] | None] | None = None

    def install(self) -> None:
        """Register the global hooks (idempotent)."""
        if self._handles:
            return
        from torch.nn.modules import module as module_mod

        self._handles = [
            module_mod.register_module_forward_pre_hook(self._pre_hook),
            module_mod.register_module_forward_hook(self._post_hook, always_call=True),
        ]

    def uninstall(self) -> None:
        """Remove the global hooks; forwards still running simply stop being tracked."""
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    def current_source(self, frame: FrameType | None) -> dict[str, Any] | None:
        """Source dict of the first user frame at or above ``frame`` (an op's caller)."""
        return find_source(frame, self._stack.entries)

    def entries(self) -> list[Any]:
        """This thread's running-module entries, innermost last."""
        return self._stack.entries

    def clear_thread(self) -> None:
        """Forget this thread's running modules (uninstall: nothing may hold their frames)."""
        self._stack.entries.clear()

    def current_path(self) -> str | None:
        """Dotted path of the innermost module whose forward runs on this thread, or None."""
        entries = self._stack.entries
        return entries[-1].path if entries else None

    # -- hooks: never raise, never return a value -------------------------------------------

    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        if _compiling():
            return  # under torch.compile: trace nothing of ours into the user's graph
        try:
            entry = self._enter(module)
            entry.frame = call_impl_frame(sys._getframe(1))
            if not torch.is_grad_enabled():
                provenance_cuts.note("no_grad", entry.path,
                                     find_source(sys._getframe(1), self._stack.entries))
            if self.on_no_grad is not None and (
                not torch.is_grad_enabled() or _fast_path_possible(module, args)
            ):
                entry.resume = self.on_no_grad()
        except Exception:
            pass

    def _post_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if _compiling():
            return
        try:
            entries = self._stack.entries
            for index in range(len(entries) - 1, -1, -1):
                if entries[index].module is module:
                    ended = entries[index:]
                    del entries[index:]
                    for entry in reversed(ended):
                        if entry.resume is not None:
                            entry.resume()
                        # a finished entry must hold no frame (its locals hold the forward's
                        # outputs, and with them the graph) and no cycle through ``origin``
                        entry.frame = entry.table = None
                        entry.origin = None  # type: ignore[assignment]
                    break
        except Exception:
            pass

    # -- naming ------------------------------------------------------------------------------

    def _enter(self, module: nn.Module) -> _Entry:
        entries = self._stack.entries
        if not entries:
            name = _variable_name(module, user_frame(sys._getframe(2)))
            entry = _Entry(module, name or type(module).__name__)
        else:
            top = entries[-1]
            origin = top.origin
            relative = self._relative(origin, module)
            if relative is None:  # not registered under the root: a new root below ``top``
                name = _variable_name(module, user_frame(sys._getframe(2)))
                entry = _Entry(module, f"{top.path}.{name or type(module).__name__}")
            else:
                path = f"{origin.path}.{relative}" if relative else origin.path
                entry = _Entry(module, path, origin)
        entries.append(entry)
        return entry

    def _relative(self, origin: _Entry, module: nn.Module) -> str | None:
        """``module``'s path relative to ``origin.module`` ("" for itself), or None."""
        root = origin.module
        table = origin.table
        if table is None:
            table = origin.table = self._maps.get(root)
        if table is not None:
            hit = table.get(id(module))
            if hit is not None and hit[0]() is module:
                return hit[1]  # None: known not to be registered under this root
            if origin.rebuilt:
                return None
        origin.rebuilt = True
        table = {id(m): (weakref.ref(m), name) for name, m in root.named_modules()}
        hit = table.get(id(module))
        if hit is None:
            table[id(module)] = (weakref.ref(module), None)
        self._maps[root] = origin.table = table
        return hit[1] if hit is not None else None
