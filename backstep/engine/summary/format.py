"""What every tensor summary shares, host or device: names of dtypes and devices, the
summary's base fields, small tensors' values, and views of a large tensor a chunk at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from backstep.engine.rounding import round_for_dtype

SMALL = 16  # tensors with at most this many elements carry their values
CHUNK = 1 << 20  # elements per step on the careful path


_DTYPE_NAMES: dict[torch.dtype, str] = {}
_DEVICE_NAMES: dict[torch.device, str] = {}  # str(device) costs a microsecond per summary


def dtype_text(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def device_text(device: torch.device) -> str:
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return name


def base_summary(t: torch.Tensor) -> dict[str, Any]:
    return {
        "shape": list(t.shape),
        "dtype": dtype_text(t.dtype),
        "device": device_text(t.device),
        "min": None,
        "max": None,
        "mean": None,
        "norm": None,
        "nonfinite": None,
    }


def value_list(flat: list[Any], dtype: torch.dtype) -> list[Any]:
    if dtype.is_floating_point:
        return [round_for_dtype(float(v), dtype) for v in flat]
    if dtype.is_complex:
        return [[round_for_dtype(v.real, dtype), round_for_dtype(v.imag, dtype)] for v in flat]
    return list(flat)


def slabs(t: torch.Tensor, limit: int = CHUNK) -> Iterator[torch.Tensor]:
    """Views that cover ``t`` once, without copying it, each of at most ``limit`` elements
    where a row allows, as few as that. Min, max, sums and counts ignore order, so a transposed
    gradient (an ``mm``'s weight grad) is cut as the dense block it is, and other strided ones
    in slabs of whole rows, not row by row: that was 78 pieces for each GPT-2 weight gradient's
    non-finite count on an H100, two launches each, 30x plain."""
    if t.numel() <= limit or t.dim() == 0:
        yield t
        return
    p = t.permute(sorted(range(t.dim()), key=lambda d: -t.stride(d)))
    if p.is_contiguous():
        yield from p.view(-1).split(limit)  # one op for every piece (each a view, as slices)
        return
    rows = p.shape[0]
    per = p.numel() // rows
    if per > limit:
        for sub in p.unbind(0):
            yield from slabs(sub, limit)
        return
    step = limit // per
    for start in range(0, rows, step):
        yield p.narrow(0, start, min(step, rows - start))
