"""``grad_none``: a ``.grad`` that stays None, and why.

Two ways in:
- PyTorch warns when ``.grad`` of a non-leaf tensor is read. ``WarningHook`` wraps
  ``warnings.showwarning`` while a session runs: the warning is still shown exactly as before
  (same function, same message object), and the read is reported with the tensor's name and
  the node that made it.
- At the start of a ``backward()`` pass, parameters of the modules in the caller's frames that
  are not in the pass's graph while other parameters of the same module are: frozen
  (requires_grad False) or not reached by the loss (unused, detached, under no_grad). A module
  the loss does not touch at all is left alone: that is usually on purpose (a GAN's other
  network, another head). Checked once per backward call site: a training loop pays once.

Reads attributes (names, requires_grad, grad_fn metadata); never computes on a tensor. Imports
torch only when torch is in use: a session may wrap its sink before the script imports torch.
"""

from __future__ import annotations

import linecache
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

from backstep.engine.diagnostics import text
from backstep.engine.diagnostics.rules import Found, diagnosis, source_key

NON_LEAF_WARNING = "not a leaf Tensor is being accessed"
MAX_PARAMS = 20_000
_GRAD_READ = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.grad\b")
_ID_KEY = "backstep.id"
_SOURCE_KEY = "backstep.source"


class WarningHook:
    """Wraps ``warnings.showwarning``; calls ``report(found)`` for a non-leaf ``.grad`` read."""

    def __init__(self, report: Callable[[Found], None], last_pass: Callable[[], int | None]) -> None:
        self._report = report
        self._last_pass = last_pass
        self._previous: Any = None
        self._wrapper: Any = None

    def install(self) -> None:
        if self._wrapper is not None:
            return
        previous = warnings.showwarning
        hook = self

        def showwarning(message: Any, category: Any, filename: str, lineno: int,
                        file: Any = None, line: str | None = None) -> None:
            try:
                hook._show(previous, sys._getframe(1), message, category, filename, lineno,
                           file, line)
            finally:
                if NON_LEAF_WARNING in str(message):
                    try:
                        hook._seen(filename, lineno, line, sys._getframe(1))
                    except Exception:  # noqa: BLE001 - a diagnosis must never break the script
                        pass

        self._previous, self._wrapper = previous, showwarning
        warnings.showwarning = showwarning

    def uninstall(self) -> None:
        if self._wrapper is None:
            return
        if warnings.showwarning is self._wrapper:  # someone who wrapped us keeps their wrapper
            warnings.showwarning = self._previous
        self._wrapper = self._previous = None

    @staticmethod
    def _show(previous: Any, caller: Any, message: Any, category: Any, filename: str,
              lineno: int, file: Any, line: str | None) -> None:
        """Show the warning as Python would have without us: when the default showwarning was
        in place, hand the very WarningMessage (tracemalloc source and all) to its writer."""
        original = getattr(warnings, "_showwarning_orig", None)
        impl = getattr(warnings, "_showwarnmsg_impl", None)
        if previous is original and impl is not None:
            msg = caller.f_locals.get("msg") if caller is not None else None
            if (isinstance(msg, warnings.WarningMessage) and msg.message is message
                    and msg.lineno == lineno and msg.filename == filename):
                impl(msg)
                return
        previous(message, category, filename, lineno, file, line)

    def _seen(self, filename: str, lineno: int, line: str | None, frame: Any) -> None:
        from backstep.engine import naming

        while frame is not None and not (frame.f_code.co_filename == filename
                                         and frame.f_lineno == lineno):
            frame = frame.f_back
        code = (line if line is not None else linecache.getline(filename, lineno)).strip()
        source = {"file": filename, "line": lineno, "code": code}
        if frame is not None and naming.is_internal(filename):
            frame = naming.user_frame(frame)  # read through torch's or backstep's own frames
        if frame is not None:
            source = naming.frame_source(frame) or source
            code = source.get("code") or ""
        expr, tensor = _read_expression(code, frame)
        node_id = made = None
        grad_fn = getattr(tensor, "grad_fn", None) if tensor is not None else None
        if grad_fn is not None:
            try:
                metadata = grad_fn.metadata
                node_id = metadata.get(_ID_KEY)
                made = metadata.get(_SOURCE_KEY)
            except Exception:  # noqa: BLE001
                pass
        who = f"`{expr}`" if expr else "This tensor"
        by = ""
        if grad_fn is not None:
            by = f" by {type(grad_fn).__name__}"
            if made:
                by += f" at {text.where(made)}"
        name = expr or "x"
        message = (
            f"{who} is not a leaf tensor: it was computed from other tensors{by}; backward() "
            f"does not keep the gradient of such tensors, and `{name}.grad` is None. Only leaves (parameters, "
            f"tensors you created with requires_grad=True) get .grad. Fix: call "
            f"`{name}.retain_grad()` before backward() if you need its gradient, or read the "
            f".grad of the leaf it was computed from."
        )
        diag = diagnosis(self._last_pass(), "grad_none", ".grad of a non-leaf tensor is None",
                         message, severity="warning", node=node_id, source=source,
                         related=[text.related("created", made)])
        self._report((("grad_none-read", *source_key(source)), diag))


def _read_expression(code: str, frame: Any) -> tuple[str | None, Any]:
    """The ``x`` of ``x.grad`` on the line, and the tensor it names when it can be found
    without running code (locals, globals, instance and module attributes)."""
    import torch

    found = _GRAD_READ.findall(code)
    for expr in found:
        value = _lookup(expr, frame)
        if isinstance(value, torch.Tensor) and value.grad_fn is not None:
            return expr, value
    return (found[0] if found else None), None


def _lookup(expr: str, frame: Any) -> Any:
    if frame is None:
        return None
    first, *rest = expr.split(".")
    missing = object()
    value = frame.f_locals.get(first, missing)
    if value is missing:
        value = frame.f_globals.get(first, missing)
    if value is missing:
        return None
    for attr in rest:
        table = getattr(value, "__dict__", None)
        if not isinstance(table, dict):
            return None
        if attr in table:
            value = table[attr]
            continue
        for private in ("_parameters", "_buffers", "_modules"):
            inner = table.get(private)
            if isinstance(inner, dict) and attr in inner:
                value = inner[attr]
                break
        else:
            return None
    return value


class ParameterCheck:
    """Parameters of the caller's modules that a ``backward()`` pass gives no gradient."""

    def __init__(self) -> None:
        self._checked: set[tuple[Any, Any]] = set()

    def check(self, event: dict[str, Any], start: Any) -> list[Found]:
        if event.get("api") != "backward" or event.get("parent") is not None:
            return []
        caller = event.get("caller")
        key = source_key(caller)
        if key in self._checked or len(self._checked) > 10_000:
            return []
        self._checked.add(key)
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
        frozen: list[str] = []
        unused: list[str] = []
        untouched: list[str] = []
        done: set[int] = set()
        for var, module in roots:
            own = [(p, found_names.get(id(p)) or f"{var}.{q}")
                   for q, p in module.named_parameters()]
            if not any(name in leaves for _, name in own):
                # a module the loss does not use at all is often on purpose (GANs, other heads):
                # mentioned only when a recorded cut (detach / no_grad) explains it
                untouched.extend(name for p, name in own if p.requires_grad and id(p) not in done)
                done.update(id(p) for p, _ in own)
                continue
            for param, name in own:
                if name in leaves or id(param) in done:
                    continue
                done.add(id(param))
                (unused if param.requires_grad else frozen).append(name)
        number = event.get("pass")
        out: list[Found] = []
        explained, unused = _explained(unused)
        whole, _ = _explained(untouched)
        for cut, names in [(c, n) for c, n in explained] + [({**c, "whole": True}, n)
                                                             for c, n in whole]:
            where = f"{_short(cut.get('file'))}:{cut.get('line')}"
            code = f" (`{cut['code']}`)" if cut.get("code") else ""
            how = (f"the output of {cut['module']} was detached at {where}{code}"
                   if cut["kind"] == "detach"
                   else f"{cut['module']} ran under torch.no_grad() at {where}{code}")
            they = text.verb(names, "it is", "they are")
            message = (
                f"The loss of pass {number} does not depend on {text.names(names)}: {how}, so "
                f"autograd has no path from the loss back to {text.verb(names, 'it', 'them')} "
                f"and {they} left without a gradient. If {text.verb(names, 'it', 'they')} should "
                f"train, drop the {'`.detach()`' if cut['kind'] == 'detach' else '`no_grad`'} "
                f"there."
            )
            source = {"file": cut.get("file"), "line": cut.get("line"), "code": cut.get("code")}
            if cut.get("whole"):
                message += (" If that is on purpose (a GAN's generator during the "
                            "discriminator step, a frozen feature extractor), ignore this.")
            out.append((("grad_none-cut", *key, cut["module"]), diagnosis(
                number, "grad_none", f"Cut from the graph: {cut['module']}", message,
                severity="info" if cut.get("whole") else "warning",
                source=source if cut.get("file") else caller)))
        if unused:
            they, them = text.verb(unused, "it is", "they are"), text.verb(unused, "it", "them")
            its = text.verb(unused, "its", "their")
            message = (
                f"The loss of pass {number} does not depend on {text.names(unused)}: {they} "
                f"not in its graph, so this backward gives {them} no gradient ({its} .grad is "
                f"left as it was). Either the forward did not use {them} (an unused layer or "
                f"branch), or {its} result was cut off from the graph on the way to the loss: by "
                f"`.detach()`, by computing it under `torch.no_grad()`, or by turning it into a "
                f"plain number (`.item()`, `.tolist()`, `float(...)`)."
            )
            out.append((("grad_none-unused", *key), diagnosis(
                number, "grad_none", "Parameters the loss does not depend on", message,
                severity="warning", source=caller)))
        if frozen:
            them = text.verb(frozen, "it", "them")
            message = (
                f"{text.names(frozen)} {text.verb(frozen, 'gets', 'get')} no gradient from pass "
                f"{number}: requires_grad is False, so autograd does not track how the loss "
                f"depends on {them} ({text.verb(frozen, 'it is', 'they are')} frozen). If you "
                f"meant to train {them}, call `.requires_grad_(True)` on {them} before the "
                f"forward; if {text.verb(frozen, 'it is', 'they are')} frozen on purpose, "
                f"ignore this."
            )
            out.append((("grad_none-frozen", *key), diagnosis(
                number, "grad_none", "Frozen parameters get no gradient", message,
                severity="info", source=caller)))
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
    import os

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
