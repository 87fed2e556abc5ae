"""Track which nn.Module's forward is running, as a dotted path, per thread.

``enter`` and ``leave``, run around every module call (provenance_calls), keep a per-thread
stack. A root module (called with nothing on the stack) is named by the variable that holds or
reaches it in the user's frames (``model``, as its parameters' leaf names), else by its class;
nested modules get their path from the root's module map (provenance_paths), so
``model.encoder.layers.3.self_attn`` comes out whether the call went through a ModuleList or not.
A root forward that a backward re-runs (reentrant checkpoint) gets the mode pushed back for its
extent: inside the backward's call the mode is off the stack, and its nodes would go untagged.

Inside torch's own modules the tracker also stands in for the torch-function mode (see
provenance_scopes): when a library module starts with the mode on top of the thread's stack, the
mode is popped until it returns and the module gets a Region entry; the library modules it calls
get no entry, only two numbers and an id appended to the Region's log (``enter``'s fast path: a
few attribute reads and appends per call); a user module inside gets a full entry and the mode
back for its forward. Forwards under no_grad, and eval-mode transformer modules whose fast path
may run, pause the mode for their whole extent with full entries (no user module inside gets it
back), so the fast path runs exactly as without backstep.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch._C._autograd import _get_sequence_nr

from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.provenance import calls as provenance_calls
from backstep.engine.provenance import cuts as provenance_cuts
from backstep.engine.provenance.frames import (
    UNSET,
    call_impl_frame,
    find_source,
    source_dict,
    user_frame,
)
from backstep.engine.provenance.inplace import record, tensor_versions
from backstep.engine.provenance.paths import place, root_name
from backstep.engine.provenance.scopes import (
    INPLACE_CLASSES,
    LIBRARY_CLASSES,
    LIBRARY_INPLACE,
    SOURCE_KEY,
    ModuleMap,
    Region,
    module_kind,
    tag_outputs,
)

# -- what the tracker keeps per thread: ``_Entry`` is one running forward, ``_Watch`` an
# in-place library module inside a paused region; ``_Stack`` holds them, innermost last. The
# helpers read and change the thread's torch-function mode stack and name root modules.

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
        self.source: Any = UNSET  # cache for find_source()
        self.origin: _Entry = origin if origin is not None else self  # names via named_modules()
        self.rebuilt = False  # the origin's module map was rebuilt during this call
        self.table: ModuleMap | None = None  # the origin's module map, fetched once per call
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
        return node_metadata(node).get(SOURCE_KEY) if node is not None else None
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


class ModuleTracker:
    """Sees every module call (provenance_calls) and keeps the per-thread module-path stack."""

    def __init__(self) -> None:
        self._stack = _Stack()
        self._hooks_now: tuple[provenance_calls.Enter, provenance_calls.Leave] | None = None
        # Called at each forward's start with no grad; returns a callable undoing what it did.
        self.on_no_grad: Callable[[], Callable[[], None] | None] | None = None
        # The torch-function mode (with ``enabled``) paused inside library modules; None: never.
        self.mode: Any = None

    def install(self) -> None:
        """Start seeing every module call (idempotent)."""
        if self._hooks_now is not None:
            return
        self._hooks_now = self._hooks()
        provenance_calls.add(*self._hooks_now)

    def uninstall(self) -> None:
        """Stop seeing module calls; forwards still running simply stop being tracked."""
        hooks, self._hooks_now = self._hooks_now, None
        if hooks is not None:
            provenance_calls.remove(*hooks)

    def entries(self) -> list[Any]:
        """This thread's running-module entries, innermost last."""
        return self._stack.entries

    def clear_thread(self) -> None:
        """Forget this thread's running modules (uninstall: nothing may hold their frames)."""
        entries = self._stack.entries
        for entry in entries:
            if type(entry) is Region:
                entry.finish(_get_sequence_nr())
            elif type(entry) is _Watch:
                entry.versions = []
            else:
                entry.frame = entry.table = entry.origin = None
        entries.clear()
        self._stack.region = None

    def current(self) -> Any:
        """The innermost running-module entry of this thread (``path``, ``region``), or None."""
        entries = self._stack.entries
        return entries[-1] if entries else None

    # -- enter / leave: never raise, never return a value----------------------------------------

    def _hooks(self) -> tuple[provenance_calls.Enter, provenance_calls.Leave]:
        """The (enter, leave) run around every module call (closures: inside a library module
        each must cost a few attribute reads and an append). ``sys._getframe(1)`` in them is the
        call's frame in provenance_calls."""
        state = self._stack
        library, inplace = LIBRARY_CLASSES, INPLACE_CLASSES
        getframe, sequence_nr = sys._getframe, _get_sequence_nr
        enter_slow, exit_slow, watch = self._enter_slow, self._exit_slow, self._watch

        def enter(module: nn.Module, args: Any) -> None:
            try:
                region = state.region
                if region is not None:  # inside a library module, the mode paused
                    cls = module.__class__
                    if cls in library:  # a library module: log it, nothing else
                        log = region.log  # (two appends: a tuple would be a GC allocation)
                        log.append(id(module))
                        log.append(sequence_nr())
                        if cls in inplace and module.__dict__.get("inplace") is True:
                            watch(region, module, args)
                        return
                enter_slow(module, args, getframe(1))
            except Exception:
                pass

        def leave(module: nn.Module, output: Any) -> None:
            try:
                region = state.region
                if region is not None and region.module is not module:  # an inner one ended
                    region.log.append(~sequence_nr())
                    return
                exit_slow(module, output, getframe(1))
            except Exception:
                pass

        return enter, leave

    # -- the slow paths ----------------------------------------------------------------------

    def _enter_slow(self, module: nn.Module, args: Any, caller: FrameType) -> None:
        """A forward outside a paused region, or a user (or new) module inside one."""
        state = self._stack
        entries = state.entries
        region = state.region
        kind = module_kind(type(module))
        if entries and not (region is not None and kind):
            self._drop_stale(caller)  # forwards a BaseException (KeyboardInterrupt) ended
            region = state.region
        if region is not None and kind:  # a library module class seen for the first time
            region.log.append(id(module))
            region.log.append(_get_sequence_nr())
            if kind == LIBRARY_INPLACE and module.__dict__.get("inplace") is True:
                self._watch(region, module, args)
            return
        grad = _grad_enabled()
        mode = self.mode
        rerun = None
        if not entries and grad and _rerun(mode) and not _fast_path_possible(module, args):
            rerun = _push_back(mode)  # a forward a backward re-runs: tagged as any forward
        if (
            grad
            and kind
            and mode is not None
            and mode.enabled
            and _on_top(mode)
            and not _fast_path_possible(module, args)
        ):
            self._open_region(module, args, entries, caller, rerun)
            return
        path, origin = self._place(module, entries, caller)
        entry = _Entry(module, path, origin)
        entries.append(entry)
        state.region = None
        entry.frame = call_impl_frame(caller)
        if rerun is not None:
            entry.resume, entry.pushes = rerun, True
            return
        if not grad:
            provenance_cuts.note("no_grad", entry.path, find_source(caller, entries))
        if region is not None:
            # a user module inside a library module: the mode comes back for its forward, so
            # its ops get their own lines; what they make is tied to the region around it
            entry.region = region
            if (grad and mode is not None and mode.enabled
                    and not _fast_path_possible(module, args)
                    and not _compiled_by(region.module, module)):
                entry.resume = _push_back(mode)
                entry.pushes = True
            return
        if self.on_no_grad is not None and (not grad or _fast_path_possible(module, args)):
            entry.resume = self.on_no_grad()
            if entry.resume is not None:
                entry.pushes = False

    def _watch(self, region: Region, module: nn.Module, args: Any) -> None:
        """An inner module built with ``inplace=True``: check its arguments when it returns."""
        state = self._stack
        state.entries.append(_Watch(region, module, args))
        state.region = None

    def _exit_slow(self, module: nn.Module, output: Any, caller: FrameType) -> None:
        """A forward returned that is not an inner library module of a region."""
        state = self._stack
        entries = state.entries
        if not entries:
            return
        top = entries[-1]
        key = id(module)
        try:
            if top.key == key:
                if type(top) is Region and caller is not top.caller:
                    # not the call that opened it (``leave`` runs in the frame ``enter`` ran
                    # in): that one's ``leave`` never ran (a BaseException inside ``enter``),
                    # and this is a new call of the same module, logged in it
                    self._drop_stale(caller)
                    if not entries or entries[-1] is not top:
                        return
                entries.pop()
                if type(top) is Region:
                    self._close_region(top, module, output)
                elif type(top) is _Watch:
                    top.close(module)
                else:
                    self._close_entry(top)
            else:
                self._unwind(key, output)
        finally:
            top = entries[-1] if entries else None
            state.region = top if type(top) is Region else None

    def _drop_stale(self, caller: FrameType | None) -> None:
        """Forget the running-module entries whose forward is no longer among the callers of
        ``caller`` and whose ``leave`` never ran (a BaseException inside ``enter``).
        Their regions tag nothing (nodes keep no tags rather than wrong ones), and the mode is
        put back as the live entries want it (a region paused it, a user module in one pushed
        it back)."""
        entries = self._stack.entries
        mark = _call_frame(entries[-1])
        if mark is None:
            return
        frame = caller
        while frame is not None:
            if frame is mark:
                return  # the innermost one runs: so do the others
            frame = frame.f_back
        ancestors: set[int] = set()
        frame = caller
        while frame is not None:
            ancestors.add(id(frame))
            frame = frame.f_back
        index = len(entries)
        while index > 0:
            mark = _call_frame(entries[index - 1])
            if mark is None or id(mark) in ancestors:
                break
            index -= 1
        ended = entries[index:]
        del entries[index:]
        for entry in reversed(ended):
            if type(entry) is Region:
                entry.log.clear()
                entry.finish(entry.start)
            elif type(entry) is _Watch:
                entry.versions = []
            else:
                entry.frame = entry.table = entry.origin = entry.region = entry.resume = None
        top = entries[-1] if entries else None
        self._stack.region = top if type(top) is Region else None
        mode = self.mode
        if mode is None or not mode.enabled:
            return
        wanted = next((e.pushes for e in reversed(entries) if e.pushes is not None), True)
        if wanted and not _on_stack(mode):
            torch._C._push_on_torch_function_stack(mode)
        elif not wanted and _on_top(mode):
            torch._C._pop_torch_function_stack()

    def _open_region(
        self, module: nn.Module, args: Any, entries: list[Any], caller: FrameType,
        rerun: Callable[[], None] | None = None,
    ) -> None:
        """A library module called with the mode on top: pop the mode until it returns.
        ``rerun``: the mode was pushed for a forward a backward re-runs; undone at its end."""
        if entries:
            path, origin = self._place(module, entries, caller)
            impl = call_impl_frame(caller)
            source = find_source(impl.f_back if impl is not None else caller, entries)
        else:  # a root: the user frame that names it is the line that called it
            user = user_frame(caller)
            path = root_name(module, user) or type(module).__name__
            origin = None
            source = _rerun_source() if rerun is not None else None
            if source is None and user is not None:
                source = source_dict(user)
        region = Region(module, path, origin, source, _get_sequence_nr())
        region.caller = caller
        region.resume = rerun
        entries.append(region)
        try:
            torch._C._pop_torch_function_stack()
        except Exception:
            entries.pop()
            region.finish(region.start)
            raise
        self._stack.region = region
        # after the pop: with the mode on, every ``_version`` read would go through it
        region.versions = tensor_versions(args, None)

    def _close_region(self, region: Region, module: nn.Module | None, output: Any) -> None:
        """The region's module returned: tag its outputs, note in-place changes of its
        arguments, give the mode back."""
        end = _get_sequence_nr()
        versions = region.versions
        try:
            region.end = end
            if end != region.start and output is not None:
                tag_outputs(region, output)
            if versions:
                changed = _note_inplace(versions, module, region.source)
                if changed and end != region.start:
                    tag_outputs(region, changed)
        finally:
            region.finish(end)
            mode = self.mode
            if mode is not None and mode.enabled:
                torch._C._push_on_torch_function_stack(mode)
            if region.resume is not None:
                region.resume()
                region.resume = None

    @staticmethod
    def _close_entry(entry: _Entry) -> None:
        try:
            if entry.resume is not None:
                entry.resume()
        finally:
            # a finished entry must hold no frame (its locals hold the forward's outputs, and
            # with them the graph) and no cycle through ``origin``
            entry.frame = entry.table = None
            entry.origin = None  # type: ignore[assignment]
            entry.region = None

    def _unwind(self, key: int, output: Any) -> None:
        """``leave`` for a module below the top: end it and everything above it."""
        entries = self._stack.entries
        for index in range(len(entries) - 1, -1, -1):
            if entries[index].key == key:
                ended = entries[index:]
                del entries[index:]
                for entry in reversed(ended):
                    if type(entry) is Region:
                        self._close_region(entry, None, output if entry is ended[0] else None)
                    elif type(entry) is _Watch:
                        entry.close(None)
                    else:
                        self._close_entry(entry)
                break

    # -- naming ------------------------------------------------------------------------------

    def _place(
        self, module: nn.Module, entries: list[Any], caller: FrameType | None
    ) -> tuple[str, _Entry | None]:
        """(dotted path, the origin entry it is named from; None: a new root)."""
        return place(module, entries, caller)


def _compiled_by(outer: Any, module: nn.Module) -> bool:
    """``outer`` is the ``torch.compile`` wrapper (``OptimizedModule``) of ``module``: its
    forward is Dynamo's frame, so the mode stays paused there, as it is absent without
    backstep (Dynamo would trace it into every graph, guard on it, and run it per op)."""
    return type(outer).__name__ == "OptimizedModule" and \
        outer.__dict__.get("_orig_mod", getattr(outer, "_orig_mod", None)) is module
