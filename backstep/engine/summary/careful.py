"""The careful path of one tensor's summary: integer, bool, complex, sparse, quantized,
meta or huge tensors, reduced a chunk at a time: never copies a large tensor whole, never
raises."""

from __future__ import annotations

import math
from typing import Any

import torch

from backstep.engine import transfers
from backstep.engine.rounding import round_for_dtype
from backstep.engine.summary.format import (
    SMALL,
    base_summary,
    dtype_text,
    slabs,
    value_list,
)


def careful_summary(t: torch.Tensor) -> dict[str, Any]:
    """One tensor of any kind, reduced chunk by chunk in float64."""
    out = base_summary(t)
    layout = t.layout
    if t.is_meta or t.device.type == "meta":
        out["note"] = "meta tensor: no values"
        return out
    if layout != torch.strided:
        out["layout"] = str(layout).removeprefix("torch.")
        try:
            values = t.coalesce().values() if layout == torch.sparse_coo else t.values()
        except (RuntimeError, TypeError):
            out["note"] = "values not readable"
            return out
        out["nnz"] = int(values.numel())
        stats = _reduce(values, divisor=t.numel())
        out.update(stats)
        return out
    if t.is_quantized:
        t = t.dequantize()
    n = t.numel()
    if n == 0:
        out["values"] = []
        return out
    out.update(_reduce(t, divisor=n))
    if n <= SMALL:
        out["values"] = value_list(transfers.read(t.detach().reshape(-1)), t.dtype)
    return out


def _reduce(t: torch.Tensor, divisor: int) -> dict[str, Any]:
    """min/max/mean/norm/nonfinite of a dense tensor in float64, one chunk at a time."""
    t = t.detach()
    lo, hi, total, sumsq, bad = math.inf, -math.inf, 0.0, 0.0, 0
    seen = False
    for chunk in slabs(t):
        if chunk.numel() == 0:
            continue
        seen = True
        if chunk.is_complex():
            bad += int(transfers.read((~torch.isfinite(chunk)).sum()))
            chunk = chunk.abs()
        elif chunk.dtype == torch.bool:
            chunk = chunk.to(torch.uint8)
        elif chunk.is_floating_point():
            bad += int(transfers.read((~torch.isfinite(chunk)).sum()))
        c = chunk.to(torch.float64)
        lo = min(lo, float(transfers.read(c.min())))
        hi = max(hi, float(transfers.read(c.max())))
        total += float(transfers.read(c.sum()))
        sumsq += float(transfers.read((c * c).sum()))
        if math.isnan(lo) or math.isnan(hi):
            lo = hi = math.nan
    if not seen:
        return {}
    dtype = t.dtype
    return {
        "min": round_for_dtype(lo, dtype),
        "max": round_for_dtype(hi, dtype),
        "mean": round_for_dtype(total / divisor if divisor else math.nan, dtype),
        "norm": round_for_dtype(math.sqrt(sumsq), dtype),
        "nonfinite": bad,
    }


def failed_summary(shape: Any, dtype: torch.dtype) -> dict[str, Any]:
    return {"shape": list(shape), "dtype": dtype_text(dtype), "device": "cpu", "min": None,
            "max": None, "mean": None, "norm": None, "nonfinite": None,
            "note": "summary failed"}
