"""Statistics of many device tensors of one dtype in a fixed number of multi-tensor kernels.

torch 2.13 has ``_foreach_norm`` (ord 0, 1, 2, inf, with an accumulation dtype) and
``_foreach_max``, but no ``_foreach_min``, ``_foreach_sum`` or non-finite count. So a group of
tensors ``x`` is reduced as (each line one ``_foreach_*`` call over the whole group):

- max: ``_foreach_max(x)``; min: ``-_foreach_max(-x)`` (negation is exact; NaN propagates);
- norm: ``_foreach_norm(x)`` in the dtype, exactly the host path's kernel, and once more
  accumulated in float64 for the finite tensors whose norm overflows the dtype (the host path
  redoes those in float64; here the figure is ready, so nothing is held and nothing read twice);
- sum: ``|relu(x)|_1 - |relu(-x)|_1``, both accumulated in float64 (every value of a batched
  dtype is exact in float64), then rounded to the dtype as the dtype's own sum is. This is the one
  figure that is not the per-tensor kernel's: it is added up in another order (like any CUDA
  sum), so a mean's last digit may differ from the host path's, within the documented
  reduction-order tolerance. A tensor with a NaN or an Inf has its sum from its min and max;
- non-finite count: ``n`` less the L1 norm of ``sign(x * 0 + 1)``: ``x * 0`` is NaN exactly
  where ``x`` is not finite, and ``sign(NaN)`` is 0 (measured on CPU; CUDA's kernel computes
  ``(0 < a) - (a < 0)`` too, to be checked on a GPU). So every kernel is one that CUDA's
  multi-tensor fast route takes (an L0 norm is not: it launches per tensor). Exact while a
  tensor has at most 2^24 values even if the norm adds up in float32, which a held block's
  tensors always do.

The one temporary is ``-x``, reused in place for ``relu(-x)``, ``relu(x)`` and the count: as
many bytes as the group. A group's tensors go in at most two calls each: dense ones (CUDA's
multi-tensor fast route takes only non-overlapping, dense tensors) and the rest. ``available``
says whether this torch has every op; without one, ``summary.device`` reduces per tensor.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import torch

_OPS = ("_foreach_max", "_foreach_neg", "_foreach_norm", "_foreach_mul_", "_foreach_add_",
        "_foreach_clamp_min_", "_foreach_sign_", "_chunk_cat")  # _chunk_cat: small values
ROWS = 7  # max, -min, norm, |relu(x)|_1, |relu(-x)|_1, finite count, float64 norm
_F64 = torch.float64


def available() -> bool:
    """Whether this torch has every multi-tensor op the grouped reduction needs."""
    return all(hasattr(torch, name) for name in _OPS)


def stats(reps: list[torch.Tensor], dense: list[bool]) -> tuple[torch.Tensor, list[int]]:
    """The ``ROWS`` x ``len(reps)`` float64 statistics of same-dtype, same-device tensors with
    elements, as one flat tensor (row-major), and the column of each of ``reps`` (the dense
    ones come first); nothing is read."""
    parts: list[torch.Tensor] = []
    order: list[int] = []
    for want in (True, False):
        picked = [k for k, d in enumerate(dense) if d is want]
        if picked:
            order += picked
            parts.append(_stats([reps[k] for k in picked]))
    data = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
    column = [0] * len(order)
    for c, k in enumerate(order):
        column[k] = c
    return data.reshape(-1), column


def _stats(x: list[torch.Tensor]) -> torch.Tensor:
    """``stats`` of one list that a multi-tensor kernel takes whole: (ROWS, len(x))."""
    maxs = torch._foreach_max(x)
    norms = torch._foreach_norm(x)
    wide = torch._foreach_norm(x, 2, dtype=_F64)
    t = torch._foreach_neg(x)  # the temporary: -x
    negmins = torch._foreach_max(t)
    torch._foreach_clamp_min_(t, 0.0)  # relu(-x)
    neg_sums = torch._foreach_norm(t, 1, dtype=_F64)
    # relu(-x) + x: relu(x) exactly where x is finite; NaN where x is NaN or -Inf, Inf where Inf
    # (a tensor that is not finite takes its sum from its min and max)
    torch._foreach_add_(t, x)
    pos_sums = torch._foreach_norm(t, 1, dtype=_F64)
    torch._foreach_mul_(t, 0.0)  # 0 where x is finite, NaN where not
    torch._foreach_add_(t, 1.0)
    torch._foreach_sign_(t)  # 1 where finite, 0 where not
    finite = torch._foreach_norm(t, 1, dtype=_F64)
    own = torch.stack([*maxs, *negmins, *norms]).to(_F64)
    wide64 = torch.stack([*pos_sums, *neg_sums, *finite, *wide])
    return torch.cat([own, wide64]).view(ROWS, len(x))


_HALF = struct.Struct("e")
_SINGLE = struct.Struct("f")


def total(pos_sum: float, neg_sum: float, lo: float, hi: float, dtype: torch.dtype) -> float:
    """A tensor's sum from its row of ``stats``, as the dtype's own sum would read: the float64
    sum rounded to the dtype, unless it is past the dtype's range (there the host path's sum
    overflows and is redone in float64, which this is). Non-finite tensors: from min and max.
    Not finite for finite values only where one sign's values add up past float64's range."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        if lo != lo or hi != hi or (hi == math.inf and lo == -math.inf):
            return math.nan
        return math.inf if hi == math.inf else -math.inf
    value = pos_sum - neg_sum
    if not math.isfinite(value):
        return value
    try:
        if dtype == torch.float32:
            rounded = _SINGLE.unpack(_SINGLE.pack(value))[0]
        elif dtype == torch.float16:
            rounded = _HALF.unpack(_HALF.pack(value))[0]
        elif dtype == torch.bfloat16:
            rounded = _bfloat16(value)
        else:
            return value
    except OverflowError:  # struct refuses some values past the format's range
        return value
    return rounded if math.isfinite(rounded) else value


def _bfloat16(value: float) -> float:
    """``value`` rounded to bfloat16 (to nearest, ties to even) through float32; past its range
    the float64 value (as an overflowed sum redone in float64)."""
    bits = struct.unpack("I", _SINGLE.pack(value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = struct.unpack("f", struct.pack("I", bits))[0]
    return out if math.isfinite(out) else value


def summary_row(host: list[list[float]], j: int, n: int, dtype: torch.dtype) -> tuple[Any, ...]:
    """(min, max, norm, sum, non-finite count, float64 norm) of column ``j`` of a read block,
    for a tensor of ``n`` values."""
    hi, negmin, norm, pos_sum, neg_sum, finite, wide = (row[j] for row in host)
    lo = -negmin
    return lo, hi, norm, total(pos_sum, neg_sum, lo, hi, dtype), n - int(finite), wide
