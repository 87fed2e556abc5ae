"""Summaries of a batch of host (CPU) tensors of one dtype: a few kernels and one read for them
all, then each summary written as a dict and its JSON text (``events.text``) in one go.

Per tensor: ``aminmax`` and ``sum``, and one ``_foreach_norm`` over the batch. These are the
values traces have always carried: min and max (NaN and Inf propagate, so a finite pair means no
non-finite value), the mean from the dtype's own sum, the norm from ``_foreach_norm``; only where
the norm or sum overflowed the dtype are they redone in float64. Views of one block of memory are
reduced once.
"""

from __future__ import annotations

from math import isfinite, nan
from operator import truediv
from typing import Any

import torch

from backstep.engine import transfers
from backstep.engine.rounding import DIGITS, put_extremes, round_digits, stat_value
from backstep.engine.summary.format import SMALL, base_summary, device_text, dtype_text, value_list
from backstep.engine.summary.scalars import MEAN_FORMAT as _MEAN_FORMAT
from backstep.engine.summary.scalars import shape_text, write_scalars
from backstep.engine.summary.scalars import tail as _tail
from backstep.events.text import Encoded, json_safe

_NORMS_AT_ONCE = 16


class HostGroup:
    """Host tensors of one dtype in a summary batch, held until they are reduced.

    ``settle`` reduces what is held and lets it go (a batch that holds too many bytes), keeping
    only the reductions; ``compute`` reduces the rest and writes every summary, rounding and
    reading all the settled reductions at once. (Reducing each tensor as it arrives, while the
    gradient a node just wrote is in the cache, measured slower.)
    """

    __slots__ = ("slots", "tensors", "numels", "owner", "unique", "reps", "singles", "settled")

    def __init__(self) -> None:
        self.slots: list[int] = []
        self.tensors: list[torch.Tensor] = []
        self.numels: list[int] = []
        self.owner: list[int] = []  # index in ``reps`` of the block each tensor reads
        self.unique: dict[tuple, int] = {}  # block of memory -> index in ``reps``
        self.reps: list[torch.Tensor] = []  # one tensor per block of memory
        self.singles: list[int] = []  # indices in ``reps`` of one-element tensors
        self.settled: list[_Settled] = []

    def add(self, t: torch.Tensor, slot: int, n: int, small: int) -> None:
        """Views of one block of memory (a transpose, a reshape) share their reduction."""
        if n > small:
            key = (t.data_ptr(), n) if t.is_contiguous() else memory_key(t)
            j = self.unique.get(key) if key is not None else None
        else:
            key = j = None
        if j is None:
            j = len(self.reps)
            self.reps.append(t)
            if n == 1:
                self.singles.append(j)
            if key is not None:
                self.unique[key] = j
        self.owner.append(j)
        self.slots.append(slot)
        self.tensors.append(t)
        self.numels.append(n)

    def _reduce(self) -> tuple[torch.Tensor, list[int]]:
        """min, max, norm and sum of every block, as a (4, blocks) float64 tensor, and the
        ``owner`` list that indexes its columns.

        A one-element block needs no reduction: its min, max and sum are its value and its norm
        the value's magnitude, exactly as the kernels compute them (checked from subnormals to
        the dtype's largest, in every batched dtype). Those blocks come last, all at once: a
        pass of scalar gradients (a loss, scalar parameters) costs no kernel, one read each.
        """
        reps, singles = self.reps, self.singles
        if not singles:
            return _reduce(reps), self.owner
        single = set(singles)
        order = [j for j in range(len(reps)) if j not in single] + singles
        column = {j: k for k, j in enumerate(order)}
        # read one by one: a float64 holds every value of a batched dtype exactly, so these are
        # the kernels' numbers, without the ~20 us of stacking a few scalars into one tensor
        values = [reps[j].item() for j in singles]
        raw = torch.tensor([values, values, list(map(abs, values)), values], dtype=torch.float64)
        if len(singles) < len(reps):
            raw = torch.cat([_reduce([reps[j] for j in order[: len(reps) - len(singles)]]), raw],
                            dim=1)
        return raw, [column[j] for j in self.owner]

    def _read(self) -> tuple[Any, list[int]]:
        """``_reduce``'s numbers already read, as four lists (min, max, norm, sum), where
        ``_write`` rounds them in Python (few blocks): one-element blocks' values go straight
        into the lists, never through a tensor and back. Else ``_reduce``'s tensor."""
        reps, singles = self.reps, self.singles
        if len(reps) > _ROUND_ON_HOST:
            return self._reduce()
        if not singles:
            return _reduce_read(reps), self.owner
        single = set(singles)
        order = [j for j in range(len(reps)) if j not in single] + singles
        column = {j: k for k, j in enumerate(order)}
        values = [reps[j].item() for j in singles]  # as exact as in _reduce's float64 tensor
        rest = len(reps) - len(singles)
        mins, maxs, norms, sums = (_reduce_read([reps[j] for j in order[:rest]])
                                   if rest else ([], [], [], []))
        stats = [mins + values, maxs + values, norms + list(map(abs, values)), sums + values]
        return stats, [column[j] for j in self.owner]

    def _write_singles(self, dtype: torch.dtype, results: Any) -> bool:
        """Write the finite one-element tensors' summaries (``scalars``) and keep the rest;
        True when none is left."""
        written = write_scalars(dtype, self.tensors, self.numels, self.slots, results)
        if not written:
            return False
        if len(written) == len(self.tensors):
            self._clear()
            return True
        self._drop(set(written))
        return False

    def _drop(self, gone: set[int]) -> None:
        """Forget the one-element tensors at positions ``gone``, keeping the rest as they were
        added: each kept block of memory keeps its first tensor as its representative (a
        one-element tensor is a block of its own), renumbered in the order of first use."""
        new: dict[int, int] = {}  # old index in ``reps`` -> new one
        reps: list[torch.Tensor] = []
        singles: list[int] = []
        owner: list[int] = []
        slots: list[int] = []
        tensors: list[torch.Tensor] = []
        numels: list[int] = []
        old_reps = self.reps
        for k, (j, slot, t, n) in enumerate(
                zip(self.owner, self.slots, self.tensors, self.numels, strict=True)):
            if k in gone:
                continue
            index = new.get(j)
            if index is None:
                index = new[j] = len(reps)
                reps.append(old_reps[j])
                if n == 1:
                    singles.append(index)
            owner.append(index)
            slots.append(slot)
            tensors.append(t)
            numels.append(n)
        self.unique = {key: new[j] for key, j in self.unique.items() if j in new}
        self.slots, self.tensors, self.numels, self.owner = slots, tensors, numels, owner
        self.reps, self.singles = reps, singles

    def _clear(self) -> None:
        self.slots, self.tensors, self.numels, self.owner = [], [], [], []
        self.unique, self.reps, self.singles = {}, [], []

    def settle(self, dtype: torch.dtype, results: dict[int, dict[str, Any]]) -> None:
        """Reduce the held tensors now and drop them. A batch whose every statistic is finite
        keeps its reductions for ``compute``; any other is written to ``results`` at once (its
        non-finite counts and float64 redos need the tensors). Runs under ``torch.no_grad()``."""
        if not self.tensors:
            return
        raw, owner = self._reduce()
        if bool(torch.isfinite(raw).all()):
            small = [t.reshape(-1) for t, n in zip(self.tensors, self.numels, strict=True)
                     if n <= SMALL]
            self.settled.append(_Settled(
                self.slots, [t.shape for t in self.tensors], self.numels, owner,
                raw, torch.cat(small) if small else None, self.tensors[0].device))
        else:
            _write(dtype, self.tensors, self.numels, self.slots, owner, raw, None, results)
        self._clear()

    def compute(self, dtype: torch.dtype, results: Any) -> None:
        """Write each tensor's summary to ``results[slot]``. Runs under ``torch.no_grad()``."""
        if not self.settled:
            if self.singles and self._write_singles(dtype, results):
                return
            raw, owner = self._read()
            _write(dtype, self.tensors, self.numels, self.slots, owner, raw, None, results)
            return
        # the settled batches and what is held, in one _write: one rounding, one read
        chunks = self.settled
        if self.tensors:
            self.settle(dtype, results)  # finite, or written out by now
        if not chunks:
            return
        slots: list[int] = []
        shapes: list[torch.Size] = []
        numels: list[int] = []
        owner: list[int] = []
        raws, smalls = [], []
        offset = 0
        for chunk in chunks:
            slots += chunk.slots
            shapes += chunk.shapes
            numels += chunk.numels
            owner += [j + offset for j in chunk.owner]
            offset += chunk.raw.shape[1]
            raws.append(chunk.raw)
            if chunk.small is not None:
                smalls.append(chunk.small)
        raw = torch.cat(raws, dim=1)
        small = torch.cat(smalls) if smalls else None
        _write(dtype, shapes, numels, slots, owner, raw, small, results,
               device=chunks[0].device)


def _reduce(reps: list[torch.Tensor]) -> torch.Tensor:
    """min, max, norm and sum of each tensor, as a (4, tensors) float64 tensor."""
    # one stack of every 0-d result, viewed as 4 rows: the same tensor as stacking each row
    return torch.stack(_reductions(reps)).view(4, len(reps)).to(torch.float64)


def _reduce_read(reps: list[torch.Tensor]) -> list[list[float]]:
    """``_reduce``'s rows read as four lists (min, max, norm, sum), in one transfer: the 0-d
    results read as they are (a Python float holds any batched dtype's value exactly, as the
    float64 tensor does), without the view and the copy into float64."""
    flat = transfers.read(torch.stack(_reductions(reps)))
    n = len(reps)
    return [flat[:n], flat[n : 2 * n], flat[2 * n : 3 * n], flat[3 * n :]]


def _reductions(reps: list[torch.Tensor]) -> list[torch.Tensor]:
    """The 0-d results: every tensor's min, then every max, norm and sum."""
    mins, maxs, sums, norms = [], [], [], []
    # each tensor's reductions one after the other, while it is in the cache; the norms a few
    # tensors at a time (the values are the same: one norm per tensor either way)
    for start in range(0, len(reps), _NORMS_AT_ONCE):
        chunk = reps[start : start + _NORMS_AT_ONCE]
        for t in chunk:
            lo, hi = t.aminmax()
            mins.append(lo)
            maxs.append(hi)
            sums.append(t.sum())
        norms += torch._foreach_norm(chunk)
    return mins + maxs + norms + sums


class _Settled:
    """A settled batch: its reductions, and what its summaries need of its tensors."""

    __slots__ = ("slots", "shapes", "numels", "owner", "raw", "small", "device")

    def __init__(self, slots: list[int], shapes: list[torch.Size], numels: list[int],
                 owner: list[int], raw: torch.Tensor, small: torch.Tensor | None,
                 device: torch.device) -> None:
        self.slots, self.shapes, self.numels, self.owner = slots, shapes, numels, owner
        self.raw, self.small, self.device = raw, small, device


def _write(dtype: torch.dtype, group: list[Any], numels: list[int], indices: list[int],
           owner: list[int], raw: Any, small: torch.Tensor | None, results: Any,
           device: torch.device | None = None) -> None:
    """Summaries from the reductions ``raw`` (4 rows, one column per block of memory: a
    tensor, or its rows read already).

    ``group`` holds the tensors, or (settled, every statistic finite) their shapes, with
    ``small`` the values of the small ones. Each block's numbers are rounded and written once:
    views of one block differ only in their shape.
    """
    stats = raw if type(raw) is list else transfers.read(raw)  # read already by ``_read``
    digits = DIGITS.get(dtype)
    if not digits:
        shown = stats
    elif len(stats[0]) <= _ROUND_ON_HOST:
        shown = _rounded(stats, digits)
    else:
        shown = transfers.read(round_digits(raw, digits))
    if small is None:
        # each small tensor read as it is (a scalar alone): no copy into one tensor to read
        small_values = []
        for t, n in zip(group, numels, strict=True):
            if n <= SMALL and isinstance(t, torch.Tensor):
                small_values += [t.item()] if n == 1 else t.reshape(-1).tolist()
    else:
        small_values = transfers.read(small)
    dtype_name = dtype_text(dtype)
    device_name = device_text(device if device is not None else group[0].device)
    # the JSON text of a finite summary as a trace file writes it: json.dumps(d,
    # separators=(",", ":")) of events.form.compact_summary(d) (no "cpu" device, no nonfinite 0)
    head: str | None = (f',"dtype":"{dtype_name}",' if device_name == "cpu"
                        else f',"dtype":"{dtype_name}","device":"{device_name}",')
    if not (json_safe(dtype_name) and json_safe(device_name)):
        head = None
    blocks = _blocks(dtype, stats, shown, numels, owner, head)
    pos = 0
    for t, n, i, j in zip(group, numels, indices, owner, strict=True):
        done = blocks[j]
        if done is not None:
            a, b, mean, c, tail = done
            size = t if type(t) is torch.Size else t.shape
            out = Encoded({"shape": list(size), "dtype": dtype_name, "device": device_name,
                           "min": a, "max": b, "mean": mean, "norm": c, "nonfinite": 0})
            if tail is None:
                text = None
            else:
                text = shape_text(size) + tail
            if n <= SMALL:
                values = out["values"] = value_list(small_values[pos : pos + n], dtype)
                pos += n
                if text is not None:
                    text += ',"values":[' + ",".join(map(repr, values)) + "]"
            out.text = None if text is None else text + "}"
            results[i] = out
            continue
        lo, hi, norm, total = stats[0][j], stats[1][j], stats[2][j], stats[3][j]
        finite = isfinite(lo) and isfinite(hi)
        if finite:
            # finite values whose norm or sum overflowed the dtype: redo those in float64
            norm = float(transfers.read(torch.linalg.vector_norm(t, dtype=torch.float64)))
            total = float(transfers.read(t.sum(dtype=torch.float64)))
        out = base_summary(t)
        put_extremes(out, None, lo, hi, norm, dtype)
        out["mean"] = stat_value(total / n, dtype)
        out["nonfinite"] = 0 if finite else int(transfers.read((~torch.isfinite(t)).sum()))
        if n <= SMALL:
            out["values"] = value_list(small_values[pos : pos + n], dtype)
            pos += n
        results[i] = out


_ROUND_ON_HOST = 32  # blocks up to which rounding in Python beats round_digits' ~20 kernels


def _rounded(stats: list[list[float]], digits: int) -> list[list[float]]:
    """``round_digits`` in Python: what it computes (``float(f"{v:.{digits}g}")``; NaN where
    ``v`` is not finite) for min, max and norm; the sums are not shown."""
    spec = f".{digits}g"
    return [[float(format(v, spec)) if isfinite(v) else nan for v in row] for row in stats[:3]]


def _blocks(dtype: torch.dtype, stats: list[list[float]], shown: list[list[float]],
            numels: list[int], owner: list[int], head: str | None) -> list[Any]:
    """Per block of memory: (min, max, mean, norm, the text after the shape) when every
    statistic is finite (the common case, as ``put_extremes`` and ``stat_value`` write it), else
    None. The text is None when ``head`` is."""
    mins, maxs, norms, sums = stats
    count = len(mins)
    block_numel = dict(zip(owner, numels, strict=True))  # every view of a block: its numel
    sizes = list(map(block_numel.__getitem__, range(count)))
    # a sum of four finite numbers is finite, or it overflowed (a float64 near its limits)
    if not all(map(isfinite, map(sum, zip(mins, maxs, norms, sums, strict=True)))):
        # rare: blocks with a non-finite statistic are written one by one, later
        return [_block(dtype, stats, shown, sizes[j], j, head)
                if isfinite(mins[j]) and isfinite(maxs[j]) and isfinite(norms[j])
                and isfinite(sums[j]) else None
                for j in range(count)]
    a, b, c = shown[0], shown[1], shown[2]
    if any(x != x for x in (sum(a), sum(b), sum(c))):
        # not rounded in bulk (float64), or some value that was not: stat_value's, where it was not
        a = [x if x == x else stat_value(y, dtype) for x, y in zip(a, mins, strict=True)]
        b = [x if x == x else stat_value(y, dtype) for x, y in zip(b, maxs, strict=True)]
        c = [x if x == x else stat_value(y, dtype) for x, y in zip(c, norms, strict=True)]
    means = list(map(truediv, sums, sizes))  # every view of the block has its number of elements
    mean_format = _MEAN_FORMAT.get(dtype)
    if mean_format is not None:
        means = list(map(float, map(mean_format.__mod__, means)))
    if head is None:
        tails: Any = [None] * count
    else:
        tails = [head + _tail(x, y, m, z) for x, y, m, z in zip(a, b, means, c, strict=True)]
    return list(zip(a, b, means, c, tails, strict=True))


def _block(dtype: torch.dtype, stats: list[list[float]], shown: list[list[float]], n: int,
           j: int, head: str | None) -> tuple[Any, ...]:
    lo, hi, norm, total = stats[0][j], stats[1][j], stats[2][j], stats[3][j]
    a, b, c = shown[0][j], shown[1][j], shown[2][j]
    if a != a:
        a = stat_value(lo, dtype)
    if b != b:
        b = stat_value(hi, dtype)
    if c != c:
        c = stat_value(norm, dtype)
    mean = total / n
    mean_format = _MEAN_FORMAT.get(dtype)
    if mean_format is not None:
        mean = float(mean_format % mean)
    return (a, b, mean, c, None if head is None else head + _tail(a, b, mean, c))


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
