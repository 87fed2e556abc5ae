"""``grad_none``: the ``.grad`` of a non-leaf tensor read (parameters that backward passes give
no gradient are ``untouched``'s).

PyTorch warns when ``.grad`` of a non-leaf tensor is read. ``WarningHook`` wraps
``warnings.showwarning`` while a session runs: the warning is still shown exactly as before
(same function, same message object), and the read is reported with the tensor's name and the
node that made it.

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
_GRAD_READ = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.grad\b")
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
                from backstep.engine.graph import id_in  # torch is loaded: a grad_fn
                from backstep.engine.pending_tags import metadata as node_metadata

                metadata = node_metadata(grad_fn)
                node_id = id_in(metadata)
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
