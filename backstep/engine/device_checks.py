"""Gradient breakpoints (non-finite, norm above) on accelerator tensors, without a host sync.

On CPU a check reads one number per computing node and stops at once (``capture.gradient_trip``).
On a GPU that read would stall the stream at every node. Here each node's check is queued on the
device instead: the sums and norms of its gradients go into one small tensor, copied without
blocking into pinned host memory, with an event recorded after the copy. Later hooks poll the
events (``event.query()``, no sync) oldest first; the first check that trips names the node
where the NaN/Inf (or the large norm) was born, with that node's own gradients, which are kept
(only those of unchecked nodes, only within the pass). When it is found a few nodes later, the
stop says so: "born at X (step 12), 2 nodes ago". At most ``MAX_PENDING`` checks wait: beyond
that, and at pass end, the oldest is waited for (a counted sync).

``FORCE`` sends CPU tensors down this path and ``EVENT`` makes the events, so tests can hold a
check back for a few nodes and see the deferred stop without a GPU.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import torch

from backstep.engine import transfers
from backstep.engine.sharded import as_local
from backstep.engine.summary.device import count_nonfinite
from backstep.events.breakpoints import nonfinite_detail, norm_detail

FORCE = False  # check CPU tensors the deferred way (tests)
EVENT: Any = None  # a factory for events (tests); None: torch.cuda.Event, or ready at once on CPU
MAX_PENDING = 16
CHECKED = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                     torch.complex64, torch.complex128})


def deferred(grads: tuple) -> bool:
    """Whether a node's gradients are checked on the device (any of them on a CUDA device;
    other accelerators keep the immediate check)."""
    if FORCE:
        return True
    for g in grads:
        if g is not None and g.is_cuda:
            return True
    return False


class _Ready:
    """The event of a CPU check: its values are there as soon as they are computed."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class _Check:
    __slots__ = ("node", "grad_outputs", "grad_inputs", "kinds", "host", "event", "device")

    def __init__(self, node: int, grad_outputs: tuple, grad_inputs: tuple,
                 kinds: list[tuple[int, bool, bool]], host: torch.Tensor, event: Any,
                 device: torch.Tensor) -> None:
        self.node = node
        self.grad_outputs = grad_outputs
        self.grad_inputs = grad_inputs
        self.kinds = kinds  # (gradient index, sum checked, norm checked), in check order
        self.host = host
        self.event = event
        self.device = device  # the source of the copy, alive until the copy is done


class Trip:
    """A check that tripped: the node it names, its gradients and the stop's reason."""

    __slots__ = ("node", "reason", "detail", "grad_outputs", "grad_inputs")

    def __init__(self, check: _Check, reason: str, detail: str) -> None:
        self.node = check.node
        self.reason = reason
        self.detail = detail
        self.grad_outputs = check.grad_outputs
        self.grad_inputs = check.grad_inputs


class GradientChecks:
    """The checks of one pass still in flight, oldest first."""

    def __init__(self) -> None:
        self.pending: deque[_Check] = deque()

    def __len__(self) -> int:
        return len(self.pending)

    def submit(self, bp: Any, node: int, grad_outputs: tuple, grad_inputs: tuple) -> None:
        """Queue the device reductions of one node's check; reads nothing."""
        nonfinite, above = bp.nonfinite, bp.norm_above
        values: list[torch.Tensor] = []
        kinds: list[tuple[int, bool, bool]] = []
        with torch.no_grad():
            for k, g in enumerate(as_local(grad_inputs)):
                if g is None or g.dtype not in CHECKED or g.is_meta:
                    continue
                try:
                    if nonfinite:  # in the gradient's dtype: sum(dtype=) copies it on CUDA
                        total = g.sum()
                        values.append(total.abs() if total.is_complex() else total)
                    if above is not None:
                        values.append(torch.linalg.vector_norm(
                            g, dtype=None if g.is_complex() else torch.float64)
                            .to(torch.float64))
                except (RuntimeError, TypeError, NotImplementedError):
                    continue
                kinds.append((k, nonfinite, above is not None))
            if not values:
                return
            # one value (the usual node) is copied as it is; several go into one float64 stack
            device = (values[0].reshape(1) if len(values) == 1 else torch.stack(
                [v.to(device=values[0].device, dtype=torch.float64) for v in values]))
            if device.is_cpu:
                host, event = device, (EVENT() if EVENT is not None else _Ready())
            else:
                host = torch.empty(device.shape, dtype=device.dtype, pin_memory=True)
                host.copy_(device, non_blocking=True)
                event = EVENT() if EVENT is not None else torch.cuda.Event()
                # an int index: torch.cuda.current_stream() with none looks the device up slowly
                event.record(torch.cuda.current_stream(device.device.index))
        self.pending.append(_Check(node, grad_outputs, grad_inputs, kinds, host, event, device))

    def poll(self, bp: Any, wait: bool = False) -> Trip | None:
        """The first tripped check among those whose values have arrived (all of them with
        ``wait``, or when more than ``MAX_PENDING`` wait); checks that pass are dropped."""
        pending = self.pending
        while pending:
            check = pending[0]
            if not check.event.query():
                if not (wait or len(pending) > MAX_PENDING):
                    return None
                transfers.wait(check.event)
            pending.popleft()
            trip = _evaluate(bp, check)
            if trip is not None:
                return trip
        return None

    def clear(self) -> None:
        self.pending.clear()


def _evaluate(bp: Any, check: _Check) -> Trip | None:
    """``gradient_trip``'s rules on the values read back; the exact count of non-finite values
    (one read) only for a gradient whose sum is not finite."""
    values = check.host.tolist()
    position = 0
    above = bp.norm_above
    for k, has_sum, has_norm in check.kinds:
        if has_sum:
            total = values[position]
            position += 1
            if not math.isfinite(total):
                g = as_local((check.grad_inputs[k],))[0]
                bad = int(transfers.read(count_nonfinite(g)))
                if bad:
                    return Trip(check, "nonfinite", nonfinite_detail(k, bad))
        if has_norm:
            norm = values[position]
            position += 1
            if not norm <= above:
                return Trip(check, "norm", norm_detail(k, norm, above))
    return None
