"""``grad_none``: trainable parameters that backward passes leave without a gradient.

At the start of a ``backward()`` pass, the parameters of the modules in the caller's frames
that require grad but are not in the pass's graph while other parameters of the same module
are: unused, detached, under no_grad. They are judged on what then happens, not on one graph:
a reentrant checkpoint gives its block's parameters their gradient in a nested pass the outer
graph never shows, and a multi-task model or a GAN in one module gives the other head or network
its gradient in the next pass. So a parameter is reported only when its ``.grad`` did not change
during that pass nor the ``WINDOW - 1`` top-level backward passes after it (or before the script
ended, when fewer came). Frozen parameters (requires_grad False) and a module the loss does not
touch at all (a frozen backbone, a GAN's other network) are left alone: that is on purpose.

Checked once per backward call site: a training loop pays once. Keeps weak references only.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from backstep.engine.diagnostics import text
from backstep.engine.diagnostics.rules import Found, diagnosis, source_key

MAX_PARAMS = 20_000
WINDOW = 4  # top-level backward passes a parameter may wait for its gradient
MAX_WINDOWS = 64


class _Untouched:
    """A parameter a pass's graph does not reach, and its ``.grad`` when the latest pass began."""

    __slots__ = ("name", "param", "grad", "version")

    def __init__(self, name: str, param: Any) -> None:
        self.name = name
        self.param = weakref.ref(param)
        self.snapshot()

    def snapshot(self) -> None:
        param = self.param()
        grad = None if param is None else param.grad
        self.grad = None if grad is None else weakref.ref(grad)
        self.version = None if grad is None else grad._version

    def got_gradient(self) -> bool:
        """Whether its ``.grad`` changed since the snapshot (or it is gone: nothing to say)."""
        param = self.param()
        if param is None:
            return True
        grad = param.grad
        if self.grad is None:
            return grad is not None
        return grad is not self.grad() or grad._version != self.version


class _Window:
    """The untouched parameters of one call site's first pass, while they wait."""

    __slots__ = ("key", "caller", "number", "left", "watching", "untouched")

    def __init__(self, key: Any, caller: Any, number: int, untouched: list[_Untouched]) -> None:
        self.key, self.caller, self.number = key, caller, number
        self.left = WINDOW
        self.watching: int | None = number
        self.untouched = untouched


class ParameterCheck:
    """``grad_none`` for parameters no backward pass reaches (see the module docstring)."""

    def __init__(self) -> None:
        self._checked: set[tuple[Any, Any]] = set()
        self._windows: list[_Window] = []

    def begin(self, event: dict[str, Any], start: Any) -> None:
        """A pass begins: watch the waiting parameters through it; check a new call site."""
        if event.get("api") != "backward" or event.get("parent") is not None:
            return  # autograd.grad gives no .grad; a nested pass runs inside its parent's
        number = event.get("pass", 0)
        for window in self._windows:
            window.watching = number
            for item in window.untouched:
                item.snapshot()
        caller = event.get("caller")
        key = source_key(caller)
        if key in self._checked or len(self._checked) > 10_000:
            return
        self._checked.add(key)
        untouched = _untouched(event, start)
        if untouched:
            if len(self._windows) >= MAX_WINDOWS:
                self._windows.pop(0)
            self._windows.append(_Window(key, caller, number, untouched))

    def end(self, event: dict[str, Any]) -> list[Found]:
        """A pass ends: drop the parameters it gave a gradient; report those that waited long
        enough."""
        if not self._windows:
            return []  # no parameter waits for its gradient
        number = event.get("pass", 0)
        out: list[Found] = []
        for window in list(self._windows):
            if window.watching != number:
                continue
            window.watching = None
            if event.get("status") == "error":  # an aborted pass proves nothing
                if number == window.number:  # judge the call site's next pass instead
                    self._windows.remove(window)
                    self._checked.discard(window.key)
                continue
            window.untouched = [u for u in window.untouched if not u.got_gradient()]
            window.left -= 1
            if not window.untouched or window.left <= 0:
                self._windows.remove(window)
                out += _report(window)
        return out

    def exit(self) -> list[Found]:
        """The script ends: the parameters still waiting never got a gradient."""
        windows, self._windows = self._windows, []
        return [found for window in windows if window.watching is None
                for found in _report(window)]


def _untouched(event: dict[str, Any], start: Any) -> list[_Untouched]:
    leaves = {n.get("leaf") for n in event.get("nodes") or () if n.get("leaf")}
    if not leaves:
        return []
    from backstep.engine import naming

    frame = naming.user_frame(start)
    roots = _caller_modules(frame)
    if not roots:
        return []
    params = {id(p): p for _, module in roots for p in _parameters(module)}
    found_names = naming.find_names(params, frame)
    untouched: list[_Untouched] = []
    done: set[int] = set()
    for var, module in roots:
        own = [(p, found_names.get(id(p)) or f"{var}.{q}") for q, p in module.named_parameters()]
        if not any(name in leaves for _, name in own):
            # a module the loss does not use at all is on purpose (a GAN's other network, a
            # frozen feature extractor, another task's head): left alone
            done.update(id(p) for p, _ in own)
            continue
        for param, name in own:
            if name in leaves or id(param) in done:
                continue
            done.add(id(param))
            if param.requires_grad:  # requires_grad=False: frozen on purpose, and said so
                untouched.append(_Untouched(name, param))
    return untouched


def _report(window: _Window) -> list[Found]:
    if not window.untouched:
        return []
    number, key, caller = window.number, window.key, window.caller
    later = WINDOW - window.left - 1
    nor = (f" (nor did the {later} backward pass{'es' if later > 1 else ''} after it)"
           if later > 0 else "")
    out: list[Found] = []
    explained, unused = _explained([u.name for u in window.untouched])
    for cut, names in explained:
        where = f"{_short(cut.get('file'))}:{cut.get('line')}"
        code = f" (`{cut['code']}`)" if cut.get("code") else ""
        how = (f"the output of {cut['module']} was detached at {where}{code}"
               if cut["kind"] == "detach"
               else f"{cut['module']} ran under torch.no_grad() at {where}{code}")
        they = text.verb(names, "it is", "they are")
        message = (
            f"The loss of pass {number} does not depend on {text.names(names)}: {how}, so "
            f"autograd has no path from the loss back to {text.verb(names, 'it', 'them')} "
            f"and {they} left without a gradient{nor}. If {text.verb(names, 'it', 'they')} "
            f"should train, drop the {'`.detach()`' if cut['kind'] == 'detach' else '`no_grad`'} "
            f"there."
        )
        source = {"file": cut.get("file"), "line": cut.get("line"), "code": cut.get("code")}
        out.append((("grad_none-cut", *key, cut["module"]), diagnosis(
            number, "grad_none", f"Cut from the graph: {cut['module']}", message,
            severity="warning", source=source if cut.get("file") else caller)))
    if unused:
        they, them = text.verb(unused, "it is", "they are"), text.verb(unused, "it", "them")
        its = text.verb(unused, "its", "their")
        message = (
            f"The loss of pass {number} does not depend on {text.names(unused)}: {they} "
            f"not in its graph, so this backward gives {them} no gradient{nor} ({its} .grad "
            f"is left as it was). Either the forward did not use {them} (an unused layer or "
            f"branch), or {its} result was cut off from the graph on the way to the loss: by "
            f"`.detach()`, by computing it under `torch.no_grad()`, or by turning it into a "
            f"plain number (`.item()`, `.tolist()`, `float(...)`)."
        )
        out.append((("grad_none-unused", *key), diagnosis(
            number, "grad_none", "Parameters the loss does not depend on", message,
            severity="warning", source=caller)))
    return out


def _explained(names: list[str]) -> tuple[list[tuple[dict[str, Any], list[str]]], list[str]]:
    """Split parameter names into those a recorded graph cut explains (grouped by cut) and
    the rest."""
    try:
        from backstep.engine.provenance.cuts import explain
    except ImportError:
        return [], names
    groups: dict[tuple, tuple[dict[str, Any], list[str]]] = {}
    rest = []
    for name in names:
        cut = explain(name)
        if cut is None:
            rest.append(name)
        else:
            groups.setdefault((cut["kind"], cut["module"], cut["line"]), (cut, []))[1].append(name)
    return list(groups.values()), rest


def _short(path: str | None) -> str:
    return os.path.basename(path) if path else "?"


def _parameters(module: Any) -> list[Any]:
    return [p for _, p in zip(range(MAX_PARAMS), module.parameters(), strict=False)]


def _caller_modules(frame: Any) -> list[tuple[str, Any]]:
    """(variable, module) for the modules held by variables in the user's frames (the frames
    ``naming.find_names`` searches, so parameter names match the engine's leaf names)."""
    from torch import nn

    from backstep.engine import naming

    roots: list[tuple[str, Any]] = []
    seen: set[int] = set()
    depth = 0
    while frame is not None and depth < 12:
        if naming.is_internal(frame.f_code.co_filename):
            frame = frame.f_back
            continue
        depth += 1
        try:
            namespace = dict(frame.f_locals)
        except Exception:  # noqa: BLE001 - a frame we cannot read holds no modules for us
            namespace = {}
        for var, value in namespace.items():
            if isinstance(value, nn.Module) and id(value) not in seen:
                seen.add(id(value))
                roots.append((var, value))
        frame = frame.f_back
    return roots
