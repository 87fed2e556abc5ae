"""``trace --when SPEC --tensors``: at each trip, the tripping node's tensors in a file.

A trip (``engine/planned``) hands over the stop's console names: the node, the gradients it
received (``grad_outputs``), those it produced (``grad_inputs``, known when a gradient spec trips
just after the node ran) and its saved tensors, read without unpacking. Each is copied detached
to the CPU there and then (the one device read a trip costs), written with ``torch.save`` as a
plain dict, and let go: nothing of the script's is kept, nothing it computes changes. A node or
module spec trips before its node runs: the file is written at once with what is known, and
again with the outgoing gradients from a post-hook of that node alone, which the pass's handles
remove at its end as they remove its own hooks.

The files go in a folder beside the trace: ``run.jsonl`` (or ``run.jsonl.gz``) ->
``run.tensors/trip-1-pass-3001.pt``; the ``trip`` event names it relative to the trace's own
folder. ``torch.load(path, weights_only=True)`` reads one back. A folder that cannot be written
is said in one line on stderr, once; the trace and the script go on without the tensors.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from backstep.engine.console_eval import Unavailable
from backstep.engine.saved import saved_status
from backstep.engine.sharded import local_shard

FORMAT = 1  # the file's "format": bumped if its keys ever change meaning


def folder_beside(trace_path: str) -> str:
    """Where a trace's trip tensors go: ``out/run.jsonl`` -> ``out/run.tensors``."""
    root = trace_path[:-3] if trace_path.endswith(".gz") else trace_path
    stem, ext = os.path.splitext(root)
    return (stem if ext else root) + ".tensors"


def file_name(trip: int, number: int) -> str:
    return f"trip-{trip}-pass-{number}.pt"


class Unreadable(Exception):
    """A tensor that cannot be copied as a plain CPU tensor, and why."""


def copied(t: Any) -> torch.Tensor:
    """``t`` detached and copied to the CPU (a DTensor: its local shard, no collective)."""
    shard = local_shard(t)
    if shard is not None:
        t = shard[0]
    if t.device.type == "meta":
        raise Unreadable("a meta tensor holds no values")
    with torch.no_grad():
        out = t.detach().to("cpu", copy=True)
    if type(out) is not torch.Tensor:
        raise Unreadable(f"a tensor subclass ({type(t).__name__})")
    if out.layout == torch.strided:
        try:  # a torch.func transform's tensor (grad, vmap) wraps one: torch.save cannot
            out.untyped_storage()
        except Exception as exc:  # noqa: BLE001
            raise Unreadable(f"no storage of its own to save ({exc})") from None
    return out


def why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, Unreadable) else f"{type(exc).__name__}: {exc}"


def gradients(grads: Any, side: str, unreadable: dict[str, str]) -> list[torch.Tensor | None]:
    """A node's gradients as a list of copies (None where undefined or unreadable: why goes
    in ``unreadable`` as ``side[k]``)."""
    out: list[torch.Tensor | None] = []
    for k, g in enumerate(grads or ()):
        try:
            out.append(copied(g) if isinstance(g, torch.Tensor) else None)
        except Exception as exc:  # noqa: BLE001 - one unreadable gradient leaves the rest
            out.append(None)
            unreadable[f"{side}[{k}]"] = why(exc)
    return out


def plain(value: Any) -> Any:
    """A saved scalar as plain data ``weights_only`` reads back (an int -1 reads from C++ as
    2**64-1; sizes and sequences as lists; anything else as its text)."""
    if value is None or isinstance(value, (bool, float, str)):
        return value
    if isinstance(value, int):
        return value - (1 << 64) if value >= (1 << 63) else value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


FREED = ("freed: PyTorch lets a node's saved tensors go once it has run, unless "
         "retain_graph=True (a trip found a few nodes late, on an accelerator, comes after)")


def saved_tensors(values: dict[str, Any], status: dict[str, str]
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """(readable saved tensors and scalars by name, unreadable ones by name with why), from
    the console's ``saved`` (``console_eval.saved_values``); ``status``: ``saved_status``'s."""
    saved: dict[str, Any] = {}
    unreadable: dict[str, str] = {}

    def one(name: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            try:
                return copied(value)
            except Exception as exc:  # noqa: BLE001
                unreadable[name] = why(exc)
                return None
        if isinstance(value, Unavailable):  # freed by an earlier pass, or packed by hooks
            unreadable[name] = FREED if status.get(name) == "freed" else value.why
            return None
        return plain(value)

    for name, value in values.items():
        if isinstance(value, tuple) and any(isinstance(v, (torch.Tensor, Unavailable))
                                            for v in value):
            saved[name] = [one(f"{name}[{k}]", v) for k, v in enumerate(value)]
        else:
            kept = one(name, value)
            if name not in unreadable:
                saved[name] = kept
    return saved, unreadable


def write(path: str, data: dict[str, Any]) -> None:
    """``torch.save`` to ``path`` through a temporary beside it: never a half-written file."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as f:
            torch.save(data, f)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


class TripTensors:
    """``TripController.on_trip`` for ``--tensors``: (trip event, pass, console) -> the file's
    name relative to the trace's folder, or None when nothing was written."""

    def __init__(self, trace_path: str) -> None:
        self.folder = folder_beside(trace_path)
        self.broken = False  # the folder could not be written: said once, then no more tries

    def __call__(self, event: dict[str, Any], on: Any, console: Any) -> str | None:
        names = getattr(console, "names", None)
        if self.broken or names is None:
            return None
        number, trip = event.get("n"), event.get("trip")
        if not isinstance(number, int) or not isinstance(trip, int):
            return None
        node = names.get("node")
        unreadable: dict[str, str] = {}
        data: dict[str, Any] = {
            "format": FORMAT, "pass": number, "trip": trip, "id": event.get("id"),
            "name": event.get("name"), "reason": event.get("reason"),
            "detail": event.get("detail"),
            "grad_outputs": gradients(names.get("grad_outputs"), "grad_outputs", unreadable),
            "grad_inputs": (gradients(names["grad_inputs"], "grad_inputs", unreadable)
                            if "grad_inputs" in names else None),
        }
        status = {s["name"]: s["status"] for s in saved_status(node)
                  if isinstance(s.get("name"), str)} if node is not None else {}
        data["saved"], saved_unreadable = saved_tensors(names.get("saved") or {}, status)
        data["unreadable"] = {**unreadable, **saved_unreadable}
        data["status"] = status
        name = file_name(trip, number)
        path = os.path.join(self.folder, name)
        try:
            os.makedirs(self.folder, exist_ok=True)
            write(path, data)
        except OSError as exc:  # a folder we cannot write is never fatal: said once
            self.broken = True
            print(f"backstep: --tensors: cannot write {path}: {exc.strerror or exc} (tracing "
                  "goes on without the tensors)", file=sys.stderr)
            return None
        except Exception as exc:  # noqa: BLE001 - this trip's tensors only: the next may do
            print(f"backstep: --tensors: trip {trip}'s tensors not saved: {why(exc)} (tracing "
                  "goes on)", file=sys.stderr)
            return None
        if data["grad_inputs"] is None and node is not None:
            self._after_node(on, node, path, data)
        return os.path.join(os.path.basename(self.folder), name)

    def _after_node(self, on: Any, node: Any, path: str, data: dict[str, Any]) -> None:
        """A trip before the node ran: write the file again once it has, with what it
        produced. The hook returns None (the gradients stay autograd's) and fires once."""
        handles = getattr(on, "handles", None)
        if handles is None:
            return
        held = [data]  # the copies, let go once written (or with the hook at the pass's end)

        def after(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if not held:
                return
            known = held.pop()
            try:
                unreadable = dict(known["unreadable"])
                outgoing = gradients(grad_inputs, "grad_inputs", unreadable)
                write(path, {**known, "grad_inputs": outgoing, "unreadable": unreadable})
            except Exception:  # noqa: BLE001, S110 - the first file stands
                pass

        try:
            handles.append(node.register_hook(after))
        except Exception:  # noqa: BLE001, S110 - the file without the outgoing ones stands
            pass
