"""Tag every new autograd node with the user's line and the running module's path.

A TorchFunctionMode sees each top-level torch call on its thread. Autograd numbers the nodes it
creates with a per-thread sequence counter, so the nodes a call created are exactly those whose
``_sequence_nr()`` lies between the counter before and after it. During the forward only the
outputs' nodes are tagged (cheap), with that span; ``annotate(roots)``, run when a graph is about
to be shown, hands the tags down to each call's inner nodes (ops run inside torch's own functions
get the line of the call that ran them). Nodes made before install, in another thread or by code
the mode never saw keep no tag rather than a wrong one. Custom autograd Functions bypass
``__torch_function__``; a wrapper around ``Function.apply`` tags them the same way.

Inside torch's own modules the module tracker pops the mode (provenance_scopes): the nodes made
there carry a Region, then a Scope, instead of a span, and ``annotate`` follows both. A custom
Function applied there is tagged the same way, through the Region.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch._C._autograd import _get_sequence_nr
from torch.autograd.function import Function
from torch.overrides import TorchFunctionMode

from backstep.engine import pending_tags
from backstep.engine import saved as saved_tensors
from backstep.engine.pending_tags import PENDING as _pending
from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.pending_tags import peek
from backstep.engine.provenance import cuts as provenance_cuts
from backstep.engine.provenance import scopes as provenance_scopes
from backstep.engine.provenance.frames import find_source
from backstep.engine.provenance.inplace import mutating_name, record, tensor_versions
from backstep.engine.provenance.inplace import mutating_names as _known_names
from backstep.engine.provenance.modules import ModuleTracker
from backstep.engine.provenance.saved_versions import saved_versions
from backstep.engine.provenance.scopes import (
    AROUND_KEY,
    MODULE_KEY,
    SAVED_VERSIONS_KEY,
    SCOPE_KEY,
    SOURCE_KEY,
    SPAN_KEY,
    Region,
    inherit,
    resolve,
)

__all__ = [
    "AROUND_KEY",
    "MODULE_KEY",
    "SAVED_VERSIONS_KEY",
    "SCOPE_KEY",
    "SOURCE_KEY",
    "SPAN_KEY",
    "TaggingMode",
    "add_mode",
    "annotate",
    "pause_if_top",
    "remove_mode",
    "saved_versions",
]

_compiling = torch.compiler.is_compiling
# is_compiling() in two cheap steps (see provenance_modules): every op of the user's runs this
_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", None)
_compiler: Any = torch.compiler
if _dynamo_compiling is None or not hasattr(_compiler, "_is_compiling_flag"):
    _dynamo_compiling = _compiling
    _compiler = type("_NotCompiling", (), {"_is_compiling_flag": False})

# callables that modify no argument and detach nothing when called without keyword arguments
# (the mode's fast path); holds functions, never tensors
_PLAIN: set[Any] = set()
_CURRENT: Any = object()  # tag(): read the running module here
_NONE_MUTATED: list[Any] = []  # after_call's answer for calls that modify nothing: never appended to


class TaggingMode(TorchFunctionMode):
    """Per-thread mode that tags the nodes each call creates and records in-place bumps."""

    def __init__(self, tracker: ModuleTracker, record_saved_versions: bool) -> None:
        super().__init__()
        self.enabled = True
        self.tracker = tracker
        self._stack = tracker._stack  # its per-thread running-module entries (read per op)
        # a torch without SavedTensor.data has no version to read without unpacking
        self.record_saved_versions = record_saved_versions and saved_tensors.SAVED_DATA

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if not self.enabled or _dynamo_compiling() or _compiler._is_compiling_flag:
            # torch.compile traces the call, never our code
            return func(*args, **kwargs) if kwargs else func(*args)
        if not kwargs:
            try:
                plain = func in _PLAIN
            except TypeError:  # an unhashable callable
                plain = False
            if plain:  # most calls: no in-place change, no detach; tag what they create
                start = _get_sequence_nr()
                result = func(*args)
                end = _get_sequence_nr()
                if end != start:
                    try:
                        self.after_call(result, start, end, None, None, sys._getframe(1))
                    except Exception:
                        pass
                return result
        # may modify a tensor argument or detach one (or is seen the first time): note the
        # versions it bumps and the cut it makes (inline: no frame of ours between the user's
        # line and torch's, for warnings' stacklevels and the recursion limit)
        if kwargs is None:
            kwargs = {}
        caller = sys._getframe(1)
        op: str | None = None
        before: list[tuple[torch.Tensor, int]] | None = None
        detach = False
        try:
            detach = func in provenance_cuts.DETACH
        except TypeError:
            pass
        if detach:
            self.note_detach(args, caller)
        try:
            try:
                op = _known_names[func] if not kwargs else mutating_name(func, kwargs)
            except KeyError:
                op = mutating_name(func, kwargs)
            if op is not None:
                before = tensor_versions(args, kwargs)
            elif not kwargs and not detach:
                _PLAIN.add(func)  # the next call takes the fast path
        except Exception:
            op = None
        start = _get_sequence_nr()
        result = func(*args, **kwargs)
        end = _get_sequence_nr()
        if end != start or op is not None:
            try:
                self.after_call(result, start, end, op, before, caller)
            except Exception:
                pass
        return result

    def note_detach(self, args: tuple[Any, ...], caller: FrameType | None) -> None:
        """A tracked tensor detached: remember which module's output was cut, and where."""
        try:
            tensor = args[0] if args else None
            grad_fn = getattr(tensor, "grad_fn", None)
            if grad_fn is None:
                return
            tags = peek(grad_fn)  # the forward's tags, read without making its metadata
            module = (tags if tags is not None else node_metadata(grad_fn)).get(MODULE_KEY)
            provenance_cuts.note("detach", module, find_source(caller, self.tracker.entries()))
        except Exception:
            pass

    def after_call(
        self,
        result: Any,
        start: int,
        end: int,
        op: str | None,
        before: list[tuple[torch.Tensor, int]] | None,
        caller: FrameType | None,
    ) -> None:
        """Tag the call's output nodes; note the version bumps of its tensor arguments."""
        entries = self._stack.entries
        source = find_source(caller, entries)
        mutated: list[torch.Tensor] = _NONE_MUTATED
        if op is not None and before:
            mutated = []
            for tensor, version in before:
                if tensor._version != version and not any(t is tensor for t in mutated):
                    record(tensor, op, source)
                    mutated.append(tensor)
        if end != start:
            self.tag(result, mutated, start, end, source, entries[-1] if entries else None)

    def tag(
        self,
        result: Any,
        mutated: list[torch.Tensor],
        start: int,
        end: int,
        source: dict[str, Any] | None,
        entry: Any = _CURRENT,
    ) -> None:
        """Write the tags on the nodes (numbered in [start, end)) of the outputs and of the
        tensors modified in place; ``annotate`` passes them on to the call's inner nodes.
        ``entry``: the innermost running module's (``tracker.current()``, read by the caller)."""
        if entry is _CURRENT:
            entry = self.tracker.current()
        module = entry.path if entry is not None else None
        region = entry.region if entry is not None else None  # a user module in a region
        if source is None and module is None:
            return
        if isinstance(result, torch.Tensor):
            outputs: list[Any] | tuple[Any, ...] = (result,)
        elif isinstance(result, (tuple, list)):
            outputs = result
        else:
            outputs = ()
        if mutated:
            outputs = [*outputs, *mutated]
        span = (start, end) if end - start > 1 else None
        if span is not None:
            provenance_scopes.wide = True
        tagged: list[Any] = []
        for value in outputs:
            if not isinstance(value, torch.Tensor):
                continue
            node = value.grad_fn
            if node is None:
                continue
            number = node._sequence_nr()
            if not start <= number < end or (tagged and node in tagged):
                continue
            tagged.append(node)
            # not node.metadata (see pending_tags); pending_tags.entry, inline: every op's output
            found = _pending.get(number)
            if found is None or found[0] is not type(node):
                metadata = {}
                _pending[number] = (type(node), metadata)
            else:
                metadata = found[1]
            if source is not None:
                metadata[SOURCE_KEY] = source
            if module is not None:
                metadata[MODULE_KEY] = module
            if span is not None:
                metadata[SPAN_KEY] = span
            if region is not None:
                metadata[AROUND_KEY] = region
            if self.record_saved_versions:
                try:
                    versions = saved_versions(node)
                    if versions:
                        metadata[SAVED_VERSIONS_KEY] = versions
                except Exception:
                    pass
        if len(_pending) > pending_tags.LIMIT:
            pending_tags.bound()


def annotate(roots: Any) -> int:
    """Complete the tags of the graph behind ``roots``; returns how many nodes got tags.

    A call seen by the mode (``F.multi_head_attention_forward``) may create many nodes; only its
    outputs are tagged during the forward (cheap), with the call's sequence-number span. Walking
    from the graph's roots, an untagged parent numbered inside a tagged node's span was made by
    that same call and inherits its source and module. Nodes made inside torch's own modules
    carry the Region of the outermost one (provenance_scopes): they, and their untagged parents
    that the region made, get the source, module path and Scope of the innermost module call
    that made them. Holds nodes only for the duration of the walk. Until some node got a span
    or a Region (``provenance_scopes.wide``) there is nothing to hand down and no walk.
    """
    if not provenance_scopes.wide:
        return 0
    stack = [node for node in roots if node is not None]
    done: set[Any] = set()
    count = 0
    while stack:
        node = stack.pop()
        if node in done:
            continue
        done.add(node)
        metadata = node_metadata(node)
        span = metadata.get(SPAN_KEY)
        scope = metadata.get(SCOPE_KEY)
        if type(scope) is Region:
            if resolve(node, metadata) is not None:
                count += 1
            scope = metadata.get(SCOPE_KEY)
        if scope is None:
            scope = metadata.get(AROUND_KEY)
        for parent, _ in node.next_functions:
            if parent is None:
                continue
            if span is not None or scope is not None:
                inherited = node_metadata(parent)
                if (SOURCE_KEY not in inherited and MODULE_KEY not in inherited
                        and SCOPE_KEY not in inherited):
                    tagged = False
                    if span is not None and span[0] <= parent._sequence_nr() < span[1]:
                        for key in (SOURCE_KEY, MODULE_KEY, SPAN_KEY, SCOPE_KEY, AROUND_KEY):
                            if key in metadata:
                                inherited[key] = metadata[key]
                        tagged = True
                    elif scope is not None:
                        tagged = inherit(scope, parent, inherited)
                    if tagged:
                        count += 1
                        done.discard(parent)  # look at its parents again, now tagged
                        stack.append(parent)
                        continue
            if parent not in done:
                stack.append(parent)
    return count


# -- custom autograd Functions ------------------------------------------------------------------

_modes: list[TaggingMode] = []  # installed modes, any thread
_patch_lock = threading.Lock()
_original_apply: Any = None
_wrapped_call: Any = None  # what the wrapper calls: ``_original_apply``'s function


def _mode_here() -> TaggingMode | None:
    """Our enabled mode when it is on this thread's torch-function stack (so calls are top level)."""
    if not _modes:
        return None
    for index in range(torch._C._len_torch_function_stack()):
        mode = torch._C._get_function_stack_at(index)
        if isinstance(mode, TaggingMode) and mode.enabled:
            return mode
    return None


def _wrap_apply(original: Any) -> Callable[..., Any]:
    """``Function.apply`` that tags the node a custom Function creates, like the mode does.

    ``original`` is a Python classmethod (torch < 2.14) or a C ``classmethod_descriptor``
    (torch 2.14), which has no ``__func__`` and is bound by hand."""
    call = getattr(original, "__func__", None)
    if call is None:
        def call(cls: type, *args: Any, **kwargs: Any) -> Any:
            return original.__get__(None, cls)(*args, **kwargs)

    @functools.wraps(call)
    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return call(cls, *args, **kwargs)
        try:
            mode = _mode_here()
        except Exception:
            mode = None
        if mode is None:
            return call(cls, *args, **kwargs)
        start = _get_sequence_nr()
        # a torch.compile region (AOTAutograd's CompiledFunction): the ops its compiled code
        # runs are the compiler's, none is the user's line; the mode steps aside while they run
        resume = pause_if_top(mode) if getattr(cls, "_aot_id", None) is not None else None
        try:
            result = call(cls, *args, **kwargs)
        finally:
            if resume is not None:
                resume()
        end = _get_sequence_nr()
        if end != start:
            # outside __torch_function__ the mode is live: reading the node's saved tensors'
            # versions would call it once per tensor (54 times for a small compiled GPT region)
            resume = pause_if_top(mode)
            try:
                mode.after_call(result, start, end, None, None, sys._getframe(1))
            except Exception:
                pass
            finally:
                if resume is not None:
                    resume()
        return result

    return apply


def add_mode(mode: TaggingMode) -> None:
    """Register ``mode``; the first one wraps ``Function.apply``."""
    global _original_apply, _wrapped_call
    with _patch_lock:
        _modes.append(mode)
        if _original_apply is None:
            original = Function.__dict__["apply"]
            wrapper = _wrap_apply(original)
            Function.apply = classmethod(wrapper)  # type: ignore[method-assign,assignment]
            _original_apply, _wrapped_call = original, wrapper.__wrapped__  # type: ignore[attr-defined]


def remove_mode(mode: TaggingMode) -> None:
    """Unregister ``mode``; the last one restores ``Function.apply`` (unless someone re-wrapped it)."""
    global _original_apply
    with _patch_lock:
        if mode in _modes:
            _modes.remove(mode)
        if not _modes and _original_apply is not None:
            current = Function.__dict__.get("apply")
            wrapped = getattr(getattr(current, "__func__", None), "__wrapped__", None)
            if wrapped is not None and wrapped is _wrapped_call:
                Function.apply = _original_apply  # type: ignore[method-assign]
            _original_apply = None


def pause_if_top(mode: TaggingMode) -> Callable[[], None] | None:
    """Pop ``mode`` while a no-grad forward runs, so fast paths that refuse torch-function modes
    (nn.TransformerEncoder's, in eval) run exactly as without backstep; returns the undo."""
    depth = torch._C._len_torch_function_stack()
    if depth == 0 or torch._C._get_function_stack_at(depth - 1) is not mode:
        return None
    torch._C._pop_torch_function_stack()

    def resume() -> None:
        if mode.enabled:
            torch._C._push_on_torch_function_stack(mode)

    return resume
