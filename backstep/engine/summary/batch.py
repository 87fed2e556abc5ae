"""Tensor summaries: shape, dtype, min/max/mean/norm, non-finite count, small values.

Per-tensor reductions cost several kernel launches and a host sync each; over a 2,000-node graph
that is the whole overhead budget. So summaries are batched: ``SummaryBatch`` collects tensors and
computes dense floating-point ones together with ``torch._foreach_*`` kernels and one host
transfer. Everything else (integer, bool, complex, sparse, quantized, meta, huge) takes a careful
per-tensor path that never copies a large tensor whole and never raises.

Non-finite counts come almost free: NaN and Inf propagate into max, min and sum, so the exact count
is only computed for tensors where one of those is not finite.
"""

from __future__ import annotations

from typing import Any

import torch

from backstep.engine.sharded import local_shard
from backstep.engine.summary import device as summary_device
from backstep.engine.summary.careful import careful_summary, failed_summary
from backstep.engine.summary.format import SMALL, base_summary

BATCHABLE = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
LARGE = 1 << 24  # above this many elements a tensor is reduced on its own, never batched
PLAIN = (torch.Tensor, torch.nn.Parameter)  # subclasses (fake, functorch, DTensor) go carefully
_STRIDED = torch.strided
_TENSOR = torch.Tensor


class SummaryBatch:
    """Tensors waiting for their summaries; ``compute`` does them all in a few kernels.

    A batch holds references to its tensors until ``compute``: keep batches short-lived (the
    engine flushes at pass end, before every stop, and whenever ``nbytes`` passes its cap).
    Accelerator tensors follow ``summary_device``: at most ``HELD_BYTES`` of them are held, the
    rest are reduced as they arrive, so they never count towards ``nbytes``.
    """

    __slots__ = ("_tensors", "_slots", "nbytes", "_arrivals", "_device_held", "_held", "_host",
                 "_done", "_shards")

    def __init__(self) -> None:
        self._tensors: list[torch.Tensor | None] = []  # None: in ``_host``, or reduced already
        self._slots: dict[int, int] = {}
        self.nbytes = 0
        self._arrivals: summary_device.Arrivals | None = None
        self._device_held = 0
        self._held: list[tuple[int, int]] = []  # (slot, id) of the device tensors held now
        self._host: dict[torch.dtype, Any] = {}  # host tensors by dtype (summary_host.HostGroup)
        self._done: dict[int, dict[str, Any]] = {}  # slot -> summary written by ``settle``
        self._shards: dict[int, dict[str, Any]] = {}  # slot -> a DTensor's placement fields

    def __len__(self) -> int:
        return len(self._tensors)

    def add(self, t: Any) -> int | None:
        """Queue a tensor; its slot in ``compute()``'s result (None for a non-tensor)."""
        if t is None:  # a node's undefined gradient
            return None
        key = id(t)
        slot = self._slots.get(key)  # a tensor seen twice: one node's output, the next's input
        if slot is not None:
            return slot
        if type(t) is _TENSOR and not summary_device.FORCE and self._arrivals is None:
            # the common case, first seen: a plain dense host tensor of a batched dtype
            try:
                if t.is_cpu and t.layout == _STRIDED:
                    dtype = t.dtype
                    n = t.numel()
                    if dtype in BATCHABLE and 0 < n <= LARGE:
                        self.nbytes += n * dtype.itemsize
                        group = self._host.get(dtype)
                        if group is None:
                            return self._to_group(t, key, len(self._tensors), n, dtype)
                        slot = len(self._tensors)  # _to_group's, inline: most of a pass's
                        group.add(t, slot, n, SMALL)
                        self._slots[key] = slot
                        self._tensors.append(None)
                        return slot
            except Exception:  # noqa: BLE001 - taken the general way below
                pass
        return self._add(t, key)

    def _to_group(self, t: Any, key: int, slot: int, n: int, dtype: torch.dtype) -> int:
        """A host tensor into its dtype's group (``summary_host``), at ``slot``."""
        group = self._host.get(dtype)
        if group is None:
            from backstep.engine.summary.host import HostGroup

            group = self._host[dtype] = HostGroup()
        group.add(t, slot, n, SMALL)
        self._slots[key] = slot
        self._tensors.append(None)
        return slot

    def _add(self, t: Any, key: int) -> int | None:
        if not isinstance(t, torch.Tensor):
            return None
        if type(t) not in PLAIN:
            shard = local_shard(t)
            if shard is not None:  # this rank's piece: a global statistic needs a collective
                local, fields = shard
                slot = self._add(local, id(local))
                if slot is not None:
                    self._shards[slot] = fields
                return slot
        slot = self._slots.get(key)
        if slot is None:
            if self._arrivals is not None:
                slot = self._arrivals.find(t)
                if slot is not None:
                    return slot
            slot = len(self._tensors)
            try:
                n = t.numel()
                size = t.element_size() * n
            except (RuntimeError, TypeError):
                n, size = -1, 0
            device = summary_device.FORCE or not t.is_cpu
            if device and _batchable(t):
                if (n <= LARGE and size <= summary_device.HELD_BYTES
                        and self._device_held + size > summary_device.HELD_BYTES):
                    self._settle_device()  # the held ones reduced together, then let go
                if n > LARGE or self._device_held + size > summary_device.HELD_BYTES:
                    if self._arrivals is None:
                        self._arrivals = summary_device.Arrivals()
                    try:
                        self._arrivals.add(t, slot, base_summary(t))
                        self._tensors.append(None)
                        return slot
                    except Exception:  # noqa: BLE001 - held instead, summarised at the flush
                        pass
                self._device_held += size
                self._held.append((slot, key))
            else:
                self.nbytes += size
                # _batchable(t), knowing that t is a host tensor (so not a meta one)
                try:
                    dtype = t.dtype
                    host = (not device and 0 < n <= LARGE and type(t) in PLAIN
                            and dtype in BATCHABLE and t.layout == _STRIDED)
                    if host:
                        return self._to_group(t, key, slot, n, dtype)
                except Exception:  # noqa: BLE001 - summarised the careful way instead
                    pass
            self._slots[key] = slot
            self._tensors.append(t)
        return slot

    def _settle_device(self) -> None:
        """Reduce the accelerator tensors held so far, a few launches per dtype, and let them go:
        a batch keeps at most ``HELD_BYTES`` of gradients alive, and nothing is read before the
        flush. Those that cannot be reduced now stay held for the flush."""
        tensors = self._tensors
        groups: dict[tuple[torch.dtype, torch.device], list[tuple[int, int]]] = {}
        for slot, key in self._held:  # only these: a settle must not walk the whole batch
            t = tensors[slot]
            assert t is not None
            groups.setdefault((t.dtype, t.device), []).append((slot, key))
        if self._arrivals is None:
            self._arrivals = summary_device.Arrivals()
        kept: list[tuple[int, int]] = []
        for held in groups.values():
            slots = [slot for slot, _ in held]
            group = [tensors[slot] for slot in slots]
            try:
                self._arrivals.settle(slots, group, [base_summary(t) for t in group])
            except Exception:  # noqa: BLE001 - held instead, summarised at the flush
                kept += held
                continue
            # a tensor let go may be freed and its id() reused: the arrivals' weak refs know it
            for slot, key in held:
                tensors[slot] = None
                self._slots.pop(key, None)
        self._held = kept
        self._device_held = 0

    def settle(self) -> None:
        """Reduce the host tensors held so far and let them go: ``nbytes`` drops to 0, and
        ``compute`` later writes their summaries with the rest (one rounding, one read).
        Accelerator tensors stay as they are. Never raises."""
        tensors = self._tensors
        with torch.no_grad():
            for dtype, group in self._host.items():
                try:
                    group.settle(dtype, self._done)
                except Exception:  # noqa: BLE001 - a summary must never break the pass
                    for i, t in zip(group.slots, group.tensors, strict=True):
                        self._done[i] = self._careful_safe(t)
                    group._clear()
        for i, t in enumerate(tensors):
            if t is None:
                continue
            try:
                if _batchable(t) and (summary_device.FORCE or not t.is_cpu):
                    continue  # the device path's
            except (RuntimeError, TypeError, NotImplementedError):
                pass
            self._done[i] = self._careful_safe(t)
            tensors[i] = None
        # a tensor let go may be freed and its id() reused: later ones take new slots
        self._slots = {k: v for k, v in self._slots.items() if tensors[v] is not None}
        self.nbytes = 0

    def compute(self) -> list[dict[str, Any] | None]:
        """Summaries in slot order; empties the batch. Never raises."""
        tensors, self._tensors, self._slots, self.nbytes = self._tensors, [], {}, 0
        arrivals, self._arrivals, self._device_held = self._arrivals, None, 0
        self._held = []
        host, self._host = self._host, {}
        done, self._done = self._done, {}
        shards, self._shards = self._shards, {}
        results: list[dict[str, Any] | None] = [None] * len(tensors)
        for i, summary in done.items():
            results[i] = summary
        on_device: dict[tuple[torch.dtype, torch.device], list[tuple[int, torch.Tensor]]] = {}
        for i, t in enumerate(tensors):
            if t is None:
                continue  # in a host group, or reduced when it arrived
            try:
                if _batchable(t):
                    if summary_device.FORCE or not t.is_cpu:
                        on_device.setdefault((t.dtype, t.device), []).append((i, t))
                        continue
            except (RuntimeError, TypeError, NotImplementedError):
                pass
            results[i] = self._careful_safe(t)
        if host:
            with torch.no_grad():
                for dtype, group in host.items():
                    try:
                        group.compute(dtype, results)
                    except Exception:  # noqa: BLE001 - a summary must never break the pass
                        for i, t in zip(group.slots, group.tensors, strict=True):
                            results[i] = self._careful_safe(t)
                        for chunk in group.settled:  # reduced, but not written
                            for i, shape in zip(chunk.slots, chunk.shapes, strict=True):
                                if results[i] is None:
                                    results[i] = failed_summary(shape, dtype)
        if on_device or arrivals is not None:
            summary_device.finish(on_device, arrivals or summary_device.Arrivals(), results)
        for i, fields in shards.items():  # a plain dict: the summary's text lacks the fields
            if results[i] is not None:
                results[i] = {**results[i], "shard": fields}
        return results

    @staticmethod
    def _careful_safe(t: torch.Tensor) -> dict[str, Any]:
        try:
            with torch.no_grad():
                return careful_summary(t)
        except Exception as exc:  # noqa: BLE001 - a summary must never break the user's pass
            try:
                out = base_summary(t)
            except Exception:  # noqa: BLE001
                out = {"shape": None, "dtype": None, "device": None}
            out["note"] = f"summary failed: {type(exc).__name__}"
            return out


def _batchable(t: torch.Tensor) -> bool:
    """A plain dense floating-point tensor with elements: reduced with the batched kernels."""
    try:
        return (type(t) in PLAIN and t.dtype in BATCHABLE and t.layout == torch.strided
                and not t.is_meta and t.numel() > 0)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
