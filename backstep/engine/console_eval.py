"""The expression console of one stop: the person's code run in the debuggee, on the paused
thread, over the real tensors.

The namespace holds the stop's gradients, its node and saved tensors (read without unpacking, so
no checkpoint recompute runs), the pass's leaves, the variables of the frame that called
``backward()`` (a copy: an assignment never rebinds the script's own names) and ``_``. It lives
as long as the stop: statements persist until the pass resumes, then everything is let go.
The answer crosses the channel as plain text (the UI never imports torch); an exception is its
traceback, never the end of the pause (``console_core`` runs the line, and interrupts it on the
UI's ctrl+c).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from backstep.console_core import INTERRUPTED, Evaluator, pretty
from backstep.engine import naming
from backstep.engine.grad_edits import GradEdits


class Unavailable:
    """A saved value the console will not read, and why (shown as its repr)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<unavailable: {self.why}>"


def saved_values(node: Any) -> dict[str, Any]:
    """The node's saved tensors by name, read through ``_raw_saved_*.data`` (never unpacked:
    under checkpoint, unpacking re-runs the forward), and its saved scalars."""
    out: dict[str, Any] = {}
    for attr in dir(node):
        if attr.startswith("_raw_saved_"):
            name = attr[len("_raw_saved_"):]
            try:
                raw = getattr(node, attr)
            except Exception as exc:  # noqa: BLE001 - said, not raised
                out[name] = Unavailable(f"{type(exc).__name__}: {exc}")
                continue
            if isinstance(raw, tuple):
                out[name] = tuple(_saved_one(node, item, "") for item in raw)
            else:
                out[name] = _saved_one(node, raw, "_saved_" + name)
    for attr in dir(node):
        if attr.startswith("_saved_") and attr[len("_saved_"):] not in out:
            try:
                out[attr[len("_saved_"):]] = getattr(node, attr)
            except Exception as exc:  # noqa: BLE001
                out[attr[len("_saved_"):]] = Unavailable(f"{type(exc).__name__}: {exc}")
    return out


def _saved_one(node: Any, raw: Any, attr: str) -> Any:
    if raw is None:
        return None
    if getattr(raw, "unpack_hook", None) is not None:
        return Unavailable("packed by saved_tensors_hooks (checkpoint, offloading): reading it "
                           "would run the hook, a forward recompute under checkpoint")
    data = getattr(raw, "data", None)
    if data is not None:
        return data
    if attr:
        try:
            if getattr(node, attr) is None:  # nothing to unpack: it raises, or says None
                return None  # PyTorch never saved it (nothing needed it)
        except RuntimeError:
            pass
    return Unavailable("freed by an earlier pass without retain_graph")


def caller_frame(pass_thread: int | None) -> Any:
    """The frame that called ``backward()``: on this thread's stack, else (a device thread) on
    the stack of the thread that began the pass."""
    frame = naming.user_frame(sys._getframe(1))
    if frame is None and pass_thread is not None:
        start = sys._current_frames().get(pass_thread)
        frame = naming.user_frame(start) if start is not None else None
    return frame


def render(value: Any) -> str:
    """A value as text for the console panel: tensors with shape, dtype, device and truncated
    values; anything else pretty-printed by rich (``console_core``)."""
    if isinstance(value, torch.Tensor):
        return tensor_text(value)
    with _print_options():  # tensors inside containers are cut as short
        return pretty(value)


def tensor_text(t: torch.Tensor) -> str:
    head = f"tensor {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} {t.device}"
    if t.requires_grad:
        head += " requires_grad"
    try:
        with torch.no_grad(), _print_options():
            body = repr(t.detach())
    except Exception as exc:  # noqa: BLE001 - a meta or broken tensor
        body = f"(values unreadable: {type(exc).__name__}: {exc})"
    return f"{head}\n{body}"


class _print_options:
    """torch's print options for one repr (a few values at each end), then put back."""

    def __enter__(self) -> None:
        self.saved = torch._tensor_str.PRINT_OPTS.__dict__.copy()
        torch.set_printoptions(threshold=200, edgeitems=3, linewidth=100)

    def __exit__(self, *exc: object) -> None:
        torch._tensor_str.PRINT_OPTS.__dict__.update(self.saved)


class StopConsole:
    """The namespace and the evaluator of one stop, built at its first line; ``close`` lets
    every value go."""

    def __init__(self, names: dict[str, Any], edits: GradEdits | None) -> None:
        self.names = names
        self.edits = edits
        self.evaluator: Evaluator | None = None

    def _build(self) -> Evaluator:
        frame = self.names.pop("__frame__", None)
        namespace: dict[str, Any] = {}
        if frame is not None:
            namespace.update(frame.f_globals)
            namespace.update(naming.frame_locals(frame))
        del frame
        namespace.update(self.names)
        if self.edits is not None:
            namespace.update(self.edits.functions())
        namespace["_"] = None
        return Evaluator(namespace, render)

    def evaluate(self, source: str) -> tuple[bool, str]:
        """Run ``source`` (an expression, else statements); (ok, text to show)."""
        if self.evaluator is None:
            self.evaluator = self._build()
        ok, text = self.evaluator.evaluate(source)
        if text == INTERRUPTED:
            text += " (the pass is still paused)"
        return ok, text

    def interrupt(self) -> bool:
        """ctrl+c from the UI (another thread): False when no line runs."""
        evaluator = self.evaluator
        return evaluator.interrupt() if evaluator is not None else False

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
        self.names.clear()
        self.evaluator = None
        self.edits = None


def stop_console(p: Any, i: int, grad_outputs: tuple, grad_inputs: tuple | None,
                 slot: str | None, leaves: dict[str, Any], where: dict[str, Any],
                 emit: Callable[[dict[str, Any]], None]) -> StopConsole:
    """The console of the stop before (``slot`` "grad_outputs") or after ("grad_inputs") node
    ``i``; ``slot`` None: a stop reached late, whose gradients already flowed on."""
    node = p.graph.nodes[i]
    names: dict[str, Any] = {
        "grad_outputs": grad_outputs,
        "node": node,
        "saved": saved_values(node),
        "leaves": leaves,
        "__frame__": caller_frame(p.thread),
    }
    if grad_inputs is not None:
        names["grad_inputs"] = grad_inputs
    if slot is None:
        edits = GradEdits(grad_inputs or grad_outputs, "grad_inputs", where, emit,
                          refused="this stop came after its gradients flowed on (a late "
                                  "device check): nothing here can be replaced")
    else:
        edits = GradEdits(grad_outputs if slot == "grad_outputs" else grad_inputs or (), slot,
                          where, emit)
    return StopConsole(names, edits)
