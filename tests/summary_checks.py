"""Device-path summaries against the host path's: how to batch a list of tensors, and when two
summaries agree (up to the order a grouped block's mean was added up in)."""

from __future__ import annotations

import math
from typing import Any

import torch

from backstep.engine.summary import SummaryBatch
from backstep.engine.summary import batch as summary_batch
from backstep.engine.summary import device as summary_device


def agree(got: list[Any], want: list[Any], items: list[torch.Tensor]) -> bool:
    """Device-path summaries against the host path's: equal, except that a grouped block's mean
    comes from a sum added up in another order (``summary.grouped``), so it may differ by the
    reduction-order tolerance. Every other field (the norm included) is the same number."""
    if not summary_device.GROUPED:
        return got == want
    if len(got) != len(want):
        return False
    for g, w, t in zip(got, want, items, strict=True):
        if g == w:
            continue
        if g is None or w is None or not summary_batch._batchable(t):
            return False
        if {k: v for k, v in g.items() if k != "mean"} != {
                k: v for k, v in w.items() if k != "mean"}:
            return False
        if not _same_up_to_reduction_order(g, w, t):
            return False
    return True


def batch_summaries(items: list[torch.Tensor]) -> list[dict[str, Any] | None]:
    batch = SummaryBatch()
    slots = [batch.add(t) for t in items]
    results = batch.compute()
    return [results[s] for s in slots if s is not None]


def _same_up_to_reduction_order(got: dict[str, Any], want: dict[str, Any],
                                t: torch.Tensor) -> bool:
    """A CUDA summary against the CPU one: every field equal, except that a sum and a norm
    added up in another order (CUDA's tree reduction) may differ by a few roundings of the
    dtype, relative to the magnitudes summed."""
    loose = {"mean", "norm"}
    if {k: v for k, v in got.items() if k not in loose} != {
            k: v for k, v in want.items() if k not in loose}:
        return False
    eps = torch.finfo(t.dtype).eps
    finite = t.double().nan_to_num(0.0, 0.0, 0.0).abs()
    scales = {"mean": float(finite.mean()), "norm": float(finite.norm())}
    for key in loose:
        a, b = got.get(key), want.get(key)
        if isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
            if abs(a - b) > 8 * eps * scales[key] + 1e-300:
                return False
        elif a != b:
            return False
    return True
