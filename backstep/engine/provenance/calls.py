"""Every nn.Module call passes through the module trackers' ``enter`` and ``leave``.

Global module forward hooks (``register_module_forward_pre_hook``) would see every call too, but
they send every module call down the slow path of torch's ``Module._call_impl`` (a closure, a set,
an import and the hook loops, per call): on a 32-layer nn.TransformerEncoder, no-op global hooks
alone cost 1.04-1.08x of the forward, a no-op wrapper 1.00-1.02x. They also change what users
see: a traceback through a module shows torch's ``inner`` frame, where plain PyTorch shows none.

So while a tracker is installed, ``nn.Module._call_impl`` (what ``Module.__call__``, torch's
``_wrapped_call_impl``, calls) runs ``enter`` and ``leave`` around torch's own code (its fast path,
unless the program has hooks of its own). That is torch's ``_call_impl`` recompiled with them woven
in (provenance_woven): no frame of its own, so warnings, tracebacks and the recursion limit see
exactly the frames plain PyTorch has. Where that cannot be built exactly (or someone patched
``_call_impl`` before us) it is ``_call_impl`` below, a wrapper around the current one, whose frame
the runner strips from tracebacks. ``leave`` runs for every exception, a KeyboardInterrupt too
(always-called forward hooks only run for Exceptions). Under torch.compile (Dynamo tracing, or
export's make_fx) both only run the original. When the last tracker is removed the original comes
back, unless someone patched ``_call_impl`` over ours meanwhile: then ours stays in their chain
and only calls the original.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from backstep.engine.provenance.woven import weave

Enter = Callable[[nn.Module, tuple[Any, ...]], None]
Leave = Callable[[nn.Module, Any], None]

# torch.compiler.is_compiling() in two cheap steps: Dynamo folds is_dynamo_compiling() to True
# while it traces, and _is_compiling_flag is what is_compiling() returns otherwise
_compiler: Any = torch.compiler
_dynamo_compiling = getattr(_compiler, "is_dynamo_compiling", None)
if _dynamo_compiling is None or not hasattr(_compiler, "_is_compiling_flag"):
    _dynamo_compiling = torch.compiler.is_compiling
    _compiler = type("_NotCompiling", (), {"_is_compiling_flag": False})

_lock = threading.Lock()
_original: Callable[..., Any] = nn.Module._call_impl  # what ours calls (set at install)
_pairs: list[tuple[Enter, Leave]] = []  # the installed trackers' (enter, leave), in order
_active: tuple[Enter, Leave] | None = None  # what the wrapper calls; None: nothing installed
_state: list[tuple[Enter, Leave] | None] = [None]  # the woven function's view of _active
_stranded = False  # ours was left in the chain of a patch made over it (see remove)


def _call_impl(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``nn.Module._call_impl`` while a tracker is installed."""
    active = _active
    if active is None or _dynamo_compiling() or _compiler._is_compiling_flag:
        return _original(self, *args, **kwargs)
    enter, leave = active
    enter(self, args)
    try:
        result = _original(self, *args, **kwargs)
    except BaseException:
        leave(self, None)
        raise
    leave(self, result)
    return result


_TORCH_CALL_IMPL = nn.Module._call_impl
_woven = weave(_TORCH_CALL_IMPL, _state, _dynamo_compiling, _compiler)  # None: not possible
# the code of a module call's frame (woven, wrapper), for find_source
CALL_CODES: tuple[Any, Any] = (
    (_woven or _call_impl).__code__, _call_impl.__code__
)


def _ours(function: Any) -> bool:
    return function is _call_impl or (function is _woven and _woven is not None)


def _chain(pairs: list[tuple[Enter, Leave]]) -> tuple[Enter, Leave] | None:
    """One (enter, leave) for all installed trackers (leave in reverse order)."""
    if not pairs:
        return None
    if len(pairs) == 1:
        return pairs[0]
    frozen = tuple(pairs)

    def enter(module: nn.Module, args: tuple[Any, ...]) -> None:
        for first, _ in frozen:
            first(module, args)

    def leave(module: nn.Module, output: Any) -> None:
        for _, last in reversed(frozen):
            last(module, output)

    _run_uncompiled(enter, leave)
    return enter, leave


def _run_uncompiled(*functions: Callable[..., Any]) -> None:
    """Have torch.compile run these (and all they call) as plain Python, never trace them.

    Inside a compiled region Dynamo runs ``_call_impl`` itself untraced (torch's file), and
    would then compile each Python frame it calls: ``enter`` and ``leave`` were frames python
    never sees, so they must not become graphs, recompiles or Dynamo warnings. Without this
    private API (older torch) they would be traced."""
    try:
        from torch._C._dynamo import eval_frame

        skip = eval_frame._FrameAction.SKIP
        strategy = eval_frame._FrameExecStrategy(skip, skip)
        for function in functions:
            eval_frame.set_code_exec_strategy(function.__code__, strategy)
    except Exception:
        pass


def add(enter: Enter, leave: Leave) -> None:
    """Start calling ``enter(module, args)`` and ``leave(module, output or None)`` around every
    module call, on every thread. Both must never raise."""
    global _active, _original, _stranded
    _run_uncompiled(enter, leave)
    with _lock:
        current = nn.Module._call_impl
        if not _pairs and not _ours(current):
            if _stranded and current is not _original:
                pass  # the patch made over ours still calls ours: patching again would loop
            else:
                _original, _stranded = current, False
                woven = _woven if current is _TORCH_CALL_IMPL else None
                nn.Module._call_impl = woven or _call_impl  # type: ignore[method-assign]
        _pairs.append((enter, leave))
        _active = _state[0] = _chain(_pairs)


def remove(enter: Enter, leave: Leave) -> None:
    """Stop calling the pair (a no-op when it is not installed)."""
    global _active, _stranded
    with _lock:
        try:
            _pairs.remove((enter, leave))
        except ValueError:
            return
        _active = _state[0] = _chain(_pairs)
        if _pairs:
            return
        if _ours(nn.Module._call_impl):
            nn.Module._call_impl = _original  # type: ignore[method-assign]
        else:
            _stranded = True


def installed() -> bool:
    """True while some tracker is installed."""
    return _active is not None
