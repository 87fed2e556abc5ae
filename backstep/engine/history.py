"""A ``history`` event for every backward pass: the loss and every leaf's gradient in brief.

After a pass, each leaf's ``.grad`` is reduced on its own device with grouped kernels
(``torch._foreach_norm`` with ord 2 and ord inf: ‖grad‖ and max|grad|; on CPU, where those
loop tensor by tensor, same-shaped small gradients stacked into rows), the loss appended, and
the lot read to the host in one transfer per device (one a pass on a one-device model). A norm
is non-finite when a value is (or when the norm overflows), so the exact non-finite count is
computed only for the tensors whose norm is not finite: a second read only in a pass that has
gone wrong.

Leaves are declared once, in a ``leaves`` event (names and modules, numbered in order of first
appearance), and a ``history`` event refers to them by number; its floats are written as base64
of a little-endian float32 array (``encode_floats``; ``traces/history_file`` decodes them), its
non-finite counts sparse: about 11 bytes per leaf per pass. Nothing here changes a gradient:
the reductions run under ``no_grad`` on the gradients as they are, and any failure only costs
the pass its history line.
"""

from __future__ import annotations

import base64
import math
import sys
import weakref
from array import array
from collections.abc import Iterable
from typing import Any

import torch

from backstep.engine import naming
from backstep.engine.sharded import FSDP_POST_BACKWARD


def encode_floats(values: Iterable[float]) -> str:
    """Base64 of the little-endian float32 array of ``values`` (the history event's form)."""
    packed = array("f", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``: a pass's leaf numbers, as written."""
    parts: list[str] = []
    start = prev = None
    for n in numbers:
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def graph_leaves(roots: Iterable[Any]) -> list[Any]:
    """The leaf tensors (AccumulateGrad variables) the graph from ``roots`` reaches, each once,
    in a deterministic order: a light walk over ``next_functions``, no hooks. None in a graph
    FSDP2 takes part in (a post-backward node): its leaves are the unsharded copies, whose
    gradients land on the sharded parameters, so its history keeps the loss alone."""
    out: list[Any] = []
    stack = [r for r in roots if r is not None]
    seen = set(stack)
    accumulate = _accumulate_type()
    add, push = seen.add, stack.append
    while stack:
        fn = stack.pop()
        if type(fn) is accumulate:
            out.append(fn.variable)
            continue
        if type(fn).__name__ == FSDP_POST_BACKWARD:
            return []
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                add(nxt)
                push(nxt)
    return out


def graph_leaves_in(graph: Any) -> list[Any]:
    """``graph_leaves`` of a pass whose ``Graph`` (``engine/graph``) the capture built anyway
    (a pass it hooks): the same leaves in the same order, read from the order its walk took
    the nodes (``popped``: the same walk), without walking ``next_functions`` again."""
    nodes = graph.nodes
    accumulate = _accumulate_type()
    out: list[Any] = []
    for i in graph.popped:
        fn = nodes[i]
        kind = type(fn)
        if kind is accumulate:
            out.append(fn.variable)
        elif kind.__name__ == FSDP_POST_BACKWARD:
            return []
    return out


_ACCUMULATE_TYPE: list[Any] = []


def _accumulate_type() -> Any:
    """The class of torch's AccumulateGrad nodes (one ``type() is`` test per node)."""
    if not _ACCUMULATE_TYPE:
        leaf = torch.zeros(1, requires_grad=True)
        _ACCUMULATE_TYPE.append(type(leaf.view(1).grad_fn.next_functions[0][0]))
    return _ACCUMULATE_TYPE[0]


def _roots(t_outputs: Any) -> list[Any]:
    outputs = tuple(t_outputs) if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
    roots = []
    for t in outputs:
        if isinstance(t, torch.Tensor):
            if t.grad_fn is not None:
                roots.append(t.grad_fn)
            elif t.requires_grad:
                roots.append(torch.autograd.graph.get_gradient_edge(t).node)
    return roots


def _loss_of(t_outputs: Any) -> Any:
    """The root as a 1-element float32 tensor when the pass has one scalar root, else None."""
    outputs = tuple(t_outputs) if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
    if len(outputs) != 1 or not isinstance(outputs[0], torch.Tensor):
        return None
    root = outputs[0]
    if root.numel() != 1 or root.is_complex() or not root.is_floating_point():
        return None
    return root.detach().reshape(1).to(torch.float32)


class History:
    """The leaves seen so far and the ``leaves`` / ``history`` events of each pass."""

    def __init__(self) -> None:
        self._index: dict[int, tuple[Any, int]] = {}  # id(leaf) -> (weakref, number)
        self.count = 0

    def before(self, t_outputs: Any) -> list[Any]:
        """The pass's leaves, found before it runs (the graph is still whole then). Under
        FSDP2 none: its AccumulateGrad nodes hold the unsharded copies, whose gradients land
        on the sharded DTensor parameters, so the history keeps the loss alone there."""
        return graph_leaves(_roots(t_outputs))

    def _numbers(self, leaves: list[Any], frame: Any) -> tuple[list[int], dict[str, Any] | None]:
        """Each leaf's number, and the ``leaves`` event declaring the new ones (or None)."""
        numbers: list[int] = []
        new: list[tuple[int, Any]] = []
        index = self._index
        for leaf in leaves:
            hit = index.get(id(leaf))
            if hit is None or hit[0]() is not leaf:
                key = id(leaf)
                try:
                    ref = weakref.ref(leaf, lambda _r, key=key: index.pop(key, None))
                except TypeError:
                    numbers.append(-1)
                    continue
                hit = index[key] = (ref, self.count)
                self.count += 1
                new.append((hit[1], leaf))
            numbers.append(hit[1])
        if not new:
            return numbers, None
        found = naming.find_names({id(leaf): leaf for _, leaf in new}, frame)
        names = [found.get(id(leaf)) or naming.fallback_name(n, leaf) for n, leaf in new]
        modules = [name.rsplit(".", 1)[0] if "." in name and " " not in name else None
                   for name in names]
        return numbers, {"event": "leaves", "first": new[0][0], "names": names,
                         "modules": modules}

    def after(self, number: int, t_outputs: Any, leaves: list[Any], frame: Any,
              ) -> list[dict[str, Any]]:
        """The events of pass ``number`` once it ran: ``leaves`` (if any are new), then
        ``history``. Never raises: a failure leaves the pass with a history of its loss only."""
        events: list[dict[str, Any]] = []
        try:
            numbers, declared = self._numbers(leaves, frame)
            if declared is not None:
                events.append(declared)
            with torch.no_grad():
                loss, norms, maxes, bad, ids = self._reduce(t_outputs, leaves, numbers)
        except Exception:  # noqa: BLE001 - the history is never the script's problem
            loss, norms, maxes, bad, ids = None, [], [], [], []
        event: dict[str, Any] = {"event": "history", "n": number, "loss": _number(loss),
                                 "ids": ranges(ids), "norm": encode_floats(norms),
                                 "max": encode_floats(maxes)}
        if bad:
            event["nonfinite"] = bad
        events.append(event)
        return events

    @staticmethod
    def _reduce(t_outputs: Any, leaves: list[Any], numbers: list[int]
                ) -> tuple[float | None, list[float], list[float], list[list[int]], list[int]]:
        by_device: dict[Any, list[tuple[int, Any]]] = {}
        for leaf, n in zip(leaves, numbers, strict=True):
            g = leaf.grad
            if n < 0 or g is None or g.layout != torch.strided or g.is_complex() \
                    or not g.is_floating_point() or g.numel() == 0:
                continue
            by_device.setdefault(g.device, []).append((n, g))
        loss_t = _loss_of(t_outputs)
        loss: float | None = None
        found: list[tuple[int, float, float, Any]] = []
        for device, items in by_device.items():
            grads = [g for _, g in items]
            if device.type == "cpu":
                parts = list(_cpu_reductions(grads))
            else:
                parts = [_stack(torch._foreach_norm(grads, 2)),
                         _stack(torch._foreach_norm(grads, math.inf))]
            with_loss = loss_t is not None and loss_t.device == device
            if with_loss:
                parts.append(loss_t)
                loss_t = None
            values = torch.cat(parts).tolist()  # the pass's one read on this device
            k = len(items)
            if with_loss:
                loss = values[2 * k]
            for j, (n, g) in enumerate(items):
                found.append((n, values[j], values[k + j], g))
        if loss_t is not None:
            loss = loss_t.item()
        found.sort(key=lambda item: item[0])
        bad: list[list[int]] = []
        for position, (_, norm, _, g) in enumerate(found):
            if not math.isfinite(norm):  # only in a pass gone wrong (or a norm overflowed)
                count = int((~torch.isfinite(g)).sum())
                if count:
                    bad.append([position, count])
        return (loss, [f[1] for f in found], [f[2] for f in found], bad,
                [f[0] for f in found])


def _cpu_reductions(grads: list[Any]) -> tuple[Any, Any]:
    """Each gradient's ‖g‖ and max|g|, as two float32 tensors, on CPU. There ``_foreach_*``
    loops over the tensors, a few microseconds each whatever their size (and ord inf runs 4x
    slower than a plain read): 5 ms a pass for 384 small leaves. Small gradients of one shape
    and dtype (a layer's, repeated down the model) are stacked and reduced as rows, a few
    kernels for the lot; a large one (no copy) takes one norm and one ``aminmax`` of its own."""
    count = len(grads)
    norms = torch.empty(count, dtype=torch.float32)
    maxes = torch.empty(count, dtype=torch.float32)
    groups: dict[Any, list[int]] = {}
    large: list[int] = []
    for k, g in enumerate(grads):
        if g.numel() > _SMALL:
            large.append(k)
        else:
            groups.setdefault((g.shape, g.dtype), []).append(k)
    for members in groups.values():
        rows = torch.stack([grads[k] for k in members]).reshape(len(members), -1)
        # in the gradients' dtype, as ``_foreach_norm`` (and ``grad.norm()``) gives it
        norms[members] = torch.linalg.vector_norm(rows, dim=1).to(torch.float32)
        # amax and amin: two quick row reductions (aminmax over a dim is 7x slower); NaN stays
        maxes[members] = torch.maximum(rows.amax(dim=1), rows.amin(dim=1).neg()).to(
            torch.float32)
    if large:
        big = [grads[k] for k in large]
        norms[large] = _stack(torch._foreach_norm(big, 2))
        pairs = [g.aminmax() for g in big]
        lows = torch.stack([p.min.to(torch.float32) for p in pairs])
        highs = torch.stack([p.max.to(torch.float32) for p in pairs])
        maxes[large] = torch.maximum(highs, lows.neg())
    return norms, maxes


def _stack(values: list[Any]) -> Any:
    """0-dim tensors as one float32 tensor (cast one by one only where the dtypes differ)."""
    if all(t.dtype == torch.float32 for t in values):
        return torch.stack(values)
    return torch.stack([t.to(torch.float32) for t in values])


_SMALL = 1 << 16  # elements: a gradient this small is copied into its group's rows


def _number(value: float | None) -> float | str | None:
    """A float as strict JSON carries it: non-finite ones as the strings nan, inf, -inf."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
