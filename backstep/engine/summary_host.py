"""Summaries of a batch of host (CPU) tensors of one dtype: a few kernels and one read for them
all, then each summary written as a dict and its JSON text (``encoded``) in one go.

Per tensor: ``aminmax`` and ``sum``, and one ``_foreach_norm`` over the batch. These are the
values traces have always carried: min and max (NaN and Inf propagate, so a finite pair means no
non-finite value), the mean from the dtype's own sum, the norm from ``_foreach_norm``; only where
the norm or sum overflowed the dtype are they redone in float64. Views of one block of memory are
reduced once.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from backstep.engine import transfers
from backstep.engine.encoded import Encoded, json_safe
from backstep.engine.rounding import _DIGITS, _round_digits, _stat, put_extremes
from backstep.engine.summary import SMALL, _base, _device_name, _dtype_name, _values

_MEAN_FORMAT = {torch.float32: "%.8g", torch.float16: "%.5g", torch.bfloat16: "%.5g"}  # _stat


class HostGroup:
    """Host tensors of one dtype in a summary batch, held until ``compute`` reduces them all.

    (Reducing each one as it arrives, while the gradient a node just wrote is in the cache,
    measured slower: the kernels interleave with the engine's and the batched norm is lost.)
    """

    __slots__ = ("slots", "tensors", "numels", "owner", "unique", "reps")

    def __init__(self) -> None:
        self.slots: list[int] = []
        self.tensors: list[torch.Tensor] = []
        self.numels: list[int] = []
        self.owner: list[int] = []  # index in ``reps`` of the block each tensor reads
        self.unique: dict[tuple, int] = {}  # block of memory -> index in ``reps``
        self.reps: list[torch.Tensor] = []  # one tensor per block of memory

    def add(self, t: torch.Tensor, slot: int, n: int, small: int) -> None:
        """Views of one block of memory (a transpose, a reshape) share their reduction."""
        key = memory_key(t) if n > small else None
        j = self.unique.get(key) if key is not None else None
        if j is None:
            j = len(self.reps)
            self.reps.append(t)
            if key is not None:
                self.unique[key] = j
        self.owner.append(j)
        self.slots.append(slot)
        self.tensors.append(t)
        self.numels.append(n)

    def compute(self, dtype: torch.dtype, results: list[dict[str, Any] | None]) -> None:
        """Write each tensor's summary to ``results[slot]``. Runs under ``torch.no_grad()``."""
        reps = self.reps
        extrema = [t.aminmax() for t in reps]
        norms = torch._foreach_norm(reps)
        sums = [t.sum() for t in reps]
        raw = torch.stack(
            [
                torch.stack([e.min for e in extrema]),
                torch.stack([e.max for e in extrema]),
                torch.stack(norms),
                torch.stack(sums),
            ]
        ).to(torch.float64)
        del extrema, norms, sums
        _write(dtype, self.tensors, self.numels, self.slots, self.owner, raw, results)


def _write(dtype: torch.dtype, group: list[torch.Tensor], numels: list[int],
           indices: list[int], owner: list[int], raw: torch.Tensor,
           results: list[dict[str, Any] | None]) -> None:
    stats = transfers.read(raw)
    digits = _DIGITS.get(dtype)
    shown = transfers.read(_round_digits(raw, digits)) if digits else stats
    small = [t.reshape(-1) for t, n in zip(group, numels, strict=True) if n <= SMALL]
    small_values = transfers.read(torch.cat(small)) if small else []
    mins, maxs, norm_list, sum_list = stats
    shown_min, shown_max, shown_norm = shown[0], shown[1], shown[2]
    dtype_name, device_name = _dtype_name(dtype), _device_name(group[0].device)
    # the JSON text of a finite summary, as json.dumps(d, separators=(",", ":")) writes it
    head: str | None = (f'{{"shape":[%s],"dtype":"{dtype_name}","device":"{device_name}",'
                        '"min":%r,"max":%r,"mean":%r,"norm":%r,"nonfinite":0')
    if not (json_safe(dtype_name) and json_safe(device_name)
            and "%" not in dtype_name + device_name):
        head = None
    mean_format = _MEAN_FORMAT.get(dtype)
    isfinite = math.isfinite
    pos = 0
    for t, n, i, j in zip(group, numels, indices, owner, strict=True):
        lo, hi, norm, total = mins[j], maxs[j], norm_list[j], sum_list[j]
        if isfinite(lo) and isfinite(hi) and isfinite(norm) and isfinite(total):
            # the common case, as put_extremes and _stat write it
            a, b, c = shown_min[j], shown_max[j], shown_norm[j]
            if a != a:
                a = _stat(lo, dtype)
            if b != b:
                b = _stat(hi, dtype)
            if c != c:
                c = _stat(norm, dtype)
            mean = total / n
            if mean_format is not None:
                mean = float(mean_format % mean)
            shape = list(t.shape)
            out = Encoded({"shape": shape, "dtype": dtype_name, "device": device_name,
                           "min": a, "max": b, "mean": mean, "norm": c, "nonfinite": 0})
            text = None if head is None else head % (",".join(map(str, shape)), a, b, mean, c)
            if n <= SMALL:
                values = out["values"] = _values(small_values[pos : pos + n], dtype)
                pos += n
                if text is not None:
                    text += ',"values":[' + ",".join(map(repr, values)) + "]"
            out.text = None if text is None else text + "}"
            results[i] = out
            continue
        finite = isfinite(lo) and isfinite(hi)
        if finite:
            # finite values whose norm or sum overflowed the dtype: redo those in float64
            norm = float(transfers.read(torch.linalg.vector_norm(t, dtype=torch.float64)))
            total = float(transfers.read(t.sum(dtype=torch.float64)))
        out = _base(t)
        put_extremes(out, None, lo, hi, norm, dtype)
        out["mean"] = _stat(total / n, dtype)
        out["nonfinite"] = 0 if finite else int(transfers.read((~torch.isfinite(t)).sum()))
        if n <= SMALL:
            out["values"] = _values(small_values[pos : pos + n], dtype)
            pos += n
        results[i] = out


def memory_key(t: torch.Tensor) -> tuple | None:
    """Identifies the block of memory a dense tensor covers, whatever its view shape."""
    try:
        if t.is_contiguous():
            return (t.data_ptr(), t.numel())
        dims = sorted(zip(t.stride(), t.shape, strict=True), reverse=True)
        expected = 1
        for stride, size in reversed(dims):
            if size != 1 and stride != expected:
                return None  # overlapping or strided: not a permutation of a dense block
            expected *= size
        return (t.data_ptr(), t.numel())
    except (RuntimeError, TypeError, NotImplementedError):
        return None
