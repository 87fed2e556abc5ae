"""How summary numbers are rounded: to the digits their dtype carries, so a float32 statistic
reads as the short decimal a person would write (and the trace stays small).

A float64 statistic keeps 10 significant digits (values keep all 17): ``diff`` compares float64
with rtol 1e-7, a hundred times coarser than the 5e-10 that rounding can move a number, and the
UI shows at most 8. Seventeen digits made a float64 trace's summaries half again as long."""

from __future__ import annotations

import math
import struct

import torch

from backstep.protocol import clean_number

_F32 = struct.Struct("f")
_pack, _unpack = _F32.pack, _F32.unpack
_SINGLE = frozenset({torch.float32, torch.complex64})
_HALF = frozenset({torch.float16, torch.bfloat16})
_isfinite = math.isfinite


def round_for_dtype(x: float, dtype: torch.dtype) -> float | str:
    """A reduction result as JSON: float32 rounded to the digits float32 has."""
    if not _isfinite(x):
        return clean_number(x)
    if dtype in _SINGLE:
        return round_single(x)
    if dtype in _HALF:
        return float(format(x, ".5g"))
    return x


def round_single(x: float, eight: float | None = None) -> float:
    """``round_for_dtype`` of a finite float for float32: a float32 value's shortest form of 6 to 8
    digits that reads back the same, else 9 digits. Every summary value of a float32 tensor
    comes here: the specs are constants and the packers bound (a third faster than building
    ``f"{x:.{digits}g}"`` and looking the packer up each time). ``eight``:
    ``float(format(x, ".8g"))`` when the caller has it already (a float32 statistic)."""
    if _unpack(_pack(x))[0] == x:
        short = float(format(x, ".6g"))
        if _unpack(_pack(short))[0] == x:
            return short
        short = float(format(x, ".7g"))
        if _unpack(_pack(short))[0] == x:
            return short
        short = float(format(x, ".8g")) if eight is None else eight
        if _unpack(_pack(short))[0] == x:
            return short
    return float(format(x, ".9g"))


F64_DIGITS = 10
DIGITS = {torch.float32: 8, torch.float16: 5, torch.bfloat16: 5,
           torch.float64: F64_DIGITS}  # what stat_value keeps


def round_digits(x: torch.Tensor, digits: int) -> torch.Tensor:
    """``float(f"{v:.{digits}g}")`` for every finite float64 ``v`` at once.

    ``n / 10**k`` (or ``n * 10**-k``) with an integer ``n`` and an exact power of ten is the
    double nearest that decimal, so it prints as the short decimal. Where the power would not be
    exact (|k| > 22) or ``v`` is not finite, NaN comes back, for ``stat_value`` to treat; 0 stays 0.
    """
    magnitude = x.abs()
    usable = torch.isfinite(x) & (magnitude > 0)
    exponent = torch.floor(torch.log10(torch.where(usable, magnitude, 1.0)))
    places = (digits - 1) - exponent
    usable &= places.abs() <= 22
    places = torch.where(usable, places, 0.0)
    up = torch.pow(10.0, places.clamp(min=0))
    down = torch.pow(10.0, (-places).clamp(min=0))
    rounded = torch.round(x * up / down) / up * down
    return torch.where(usable, rounded, torch.where(magnitude > 0, x.new_tensor(math.nan), x))


def stat_value(x: float, dtype: torch.dtype) -> float | str:
    """A statistic as JSON, to the precision its dtype carries (values use ``round_for_dtype``)."""
    if not math.isfinite(x):
        return clean_number(x)
    if dtype in (torch.float32, torch.complex64):
        return float(f"{x:.8g}")
    if dtype in (torch.float16, torch.bfloat16):
        return float(f"{x:.5g}")
    if dtype in (torch.float64, torch.complex128):
        return float(f"{x:.{F64_DIGITS}g}")
    return x


def put_extremes(out: dict, shown: tuple | None, lo: float, hi: float, norm: float,
                 dtype: torch.dtype) -> None:
    """Write ``min``, ``max`` and ``norm`` into a summary: from ``shown``, the three values of a
    batch rounded in one go (a NaN there means that one was not), else each rounded alone."""
    if shown is not None:
        a, b, c = shown
        out["min"] = a if a == a else stat_value(lo, dtype)
        out["max"] = b if b == b else stat_value(hi, dtype)
        out["norm"] = c if c == c else stat_value(norm, dtype)
    else:
        out["min"] = stat_value(lo, dtype)
        out["max"] = stat_value(hi, dtype)
        out["norm"] = stat_value(norm, dtype)
