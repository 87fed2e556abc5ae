"""Summaries of accelerator tensors: reduced on the device, read back once per batch.

On a GPU a reduction costs a kernel launch and a read costs a host sync that stalls the stream,
so the rules differ from the CPU's:

- every statistic (min, max, norm, sum, the exact non-finite count, the values of small tensors)
  is computed on the device into one float64 tensor per batch and device, read with one transfer
  (``transfers.to_host``); the rounding to JSON happens on the host copy;
- a batch keeps references to at most ``HELD_BYTES`` of device gradients; when the next one
  would not fit, those held are reduced together (a few ``torch._foreach_*`` and stack launches
  per dtype, nothing read) and let go. A tensor bigger than that on its own (a large attention
  gradient) is reduced the moment it is added, with its per-tensor kernels only (``aminmax``,
  the norm, the sum, two a count piece): its 0-d results wait, unstacked, and join one stack
  per dtype at the read (``Arrivals.pending``), so they cost no stack, cast or concatenation
  of their own. Only statistics wait for the read: the batch never holds much device memory,
  never launches per tensor what it can launch per group, and never needs to flush early
  because gradients are big;
- there is no chunked per-tensor path: it exists for CPU memory safety and would read every
  chunk back. The non-finite count of a large tensor is counted piece by piece on the device,
  each piece's one temporary (``t * 0``) at most ``ARRIVAL_PIECE`` bytes, and the pieces'
  counts are added up on the host (exact).

The statistics are the same kernels as ``SummaryBatch``'s host groups (aminmax, ``_foreach_norm``,
sum in the tensor's dtype), so a summary reads the same on either path (on CUDA a sum or norm
adds up in another order, so its last digit may differ from the CPU's). Where a finite tensor's
norm or sum overflows its dtype, a held tensor is redone in float64 exactly as on the host (one
more read for that batch); a float16 tensor reduced on arrival has its fallback accumulated in
float32 in advance, and any other one (values near 1e19 and above: a diverged model) says so in
a ``note`` rather than keep a large gradient alive or pay a float64 copy of it.

Where this torch has the multi-tensor ops (``summary.grouped``), a block of at least
``GROUP_MIN`` tensors and at most ``HELD_BYTES`` is reduced in a fixed number of
``torch._foreach_*`` kernels however many tensors it has (``GROUPED``): no per-tensor launch,
only a view of each 0-d small tensor; its sums are added up in another order (see there) and
its float64 norms come with it, so a grouped block is never held for a redo. Its one
temporary is as big as the block, so a tensor bigger than ``HELD_BYTES`` is not put in one: it
is reduced on arrival as above (fewer kernels than a grouped block's thirteen, and a temporary
bounded by ``ARRIVAL_PIECE``, not by its size), and any block on a torch without those ops is
reduced per tensor as before (aminmax, sum, the norms together, the count in bounded pieces).
Memory the summaries add, so: at most ``HELD_BYTES`` of gradients kept referenced, and one
temporary of at most ``max(HELD_BYTES, ARRIVAL_PIECE)`` bytes at a time.

``FORCE`` runs CPU tensors through this path too, so tests exercise it without a GPU.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from backstep.engine import transfers
from backstep.engine.summary import grouped
from backstep.engine.summary.format import slabs

FORCE = False  # treat CPU tensors as accelerator tensors (tests, benchmarks)
GROUPED = grouped.available()  # blocks reduced by ``summary.grouped`` (else per tensor)
# fewer tensors than this cost fewer ops per tensor (aminmax, sum: ~3 each, ~6 shared) than
# grouped (~19 whatever the number): counted with bench_engine's summary-op rows
GROUP_MIN = 4
HELD_BYTES = 2 << 20  # device gradients a batch keeps referenced, then reduces together
COUNT_CHUNK = 1 << 21  # elements per non-finite count step of a held per-tensor block (temp)
# bytes of the one temporary (``t * 0``) of each count piece of a tensor reduced on arrival
# (``count_pieces``); a piece has at most COUNT_CHUNK_MAX values (float32 counts them exactly).
# 16 MiB: gpt2's shape at 6.9 summary ops per node (8 MiB: 11.1; 32 MiB: 5.8), bench_engine
ARRIVAL_PIECE = 16 << 20
COUNT_CHUNK_MAX = 1 << 24


def on_device(t: torch.Tensor) -> bool:
    """Whether ``t`` takes this path (an accelerator tensor, or any tensor under ``FORCE``)."""
    return FORCE or t.device.type not in ("cpu", "meta")


class Block:
    """Statistics of some tensors of one dtype, on the device until the batch's read.

    ``data`` is float64, laid out as rows of ``m`` (one column per distinct tensor): min, max,
    norm, sum, non-finite count, then (float16 arrivals) the float32-accumulated norm and sum,
    then the values of the small tensors, flattened in slot order.
    """

    __slots__ = ("dtype", "slots", "owner", "numels", "bases", "small", "rows", "data",
                 "tensors", "grouped", "pieces")

    def __init__(self, dtype: torch.dtype, slots: list[int], owner: list[int],
                 numels: list[int], bases: list[dict[str, Any]], small: int, rows: int,
                 data: torch.Tensor, tensors: list[torch.Tensor] | None,
                 grouped: bool = False) -> None:
        self.dtype = dtype
        self.slots = slots
        self.owner = owner
        self.numels = numels
        self.bases = bases
        self.small = small
        self.rows = rows
        self.data = data
        self.tensors = tensors  # held tensors (for the float64 redo); None once settled
        self.grouped = grouped  # rows as ``summary.grouped.stats`` lays them out
        self.pieces: list[int] | None = None  # arrivals: count pieces per column (``Pending``)


def reduce(tensors: list[torch.Tensor], slots: list[int], bases: list[dict[str, Any]],
           held: bool) -> Block:
    """Queue the device reductions of same-dtype tensors; nothing is read here.

    ``held``: the tensors stay referenced until the read (a float64 redo can use them); else the
    block stands alone (a tensor reduced on arrival, or a held group settled to free memory) and
    float16 gets its float32 fallback in advance. A few launches per block, whatever its size:
    the four statistics of every tensor go into one stack and one cast.
    """
    from backstep.engine.summary.format import SMALL
    from backstep.engine.summary.host import memory_key as _memory_key

    if (GROUPED and len(tensors) >= GROUP_MIN
            and sum(t.numel() for t in tensors) * tensors[0].dtype.itemsize <= HELD_BYTES):
        return _reduce_grouped(tensors, slots, bases)  # its temporary: the group's size
    dtype = tensors[0].dtype
    unique: dict[tuple, int] = {}
    reps: list[torch.Tensor] = []
    owner: list[int] = []
    for t in tensors:
        key = _memory_key(t) if t.numel() > SMALL else None
        j = unique.get(key) if key is not None else None
        if j is None:
            j = len(reps)
            reps.append(t)  # reduced under no_grad: no detach (an op each)
            if key is not None:
                unique[key] = j
        owner.append(j)
    with torch.no_grad():
        extrema = [t.aminmax() for t in reps]
        norms = torch._foreach_norm(reps)
        sums = [t.sum() for t in reps]
        stats = torch.stack([*(e.min for e in extrema), *(e.max for e in extrema), *norms,
                             *sums]).to(torch.float64)
        if sum(t.numel() for t in reps) * dtype.itemsize <= HELD_BYTES:
            # 0 where finite, NaN where not: the L0 norm counts them (float64: exact)
            bad = torch._foreach_norm(torch._foreach_mul(reps, 0.0), 0, dtype=torch.float64)
        else:  # one large tensor: counted with a bounded temporary
            bad = [count_nonfinite(t) for t in reps]
        parts = [stats, torch.stack([b.to(torch.float64) for b in bad])]
        rows = 5
        if not held and dtype == torch.float16:
            parts.append(torch.stack(torch._foreach_norm(reps, 2, dtype=torch.float32))
                         .to(torch.float64))
            parts.append(torch.stack([t.sum(dtype=torch.float32) for t in reps])
                         .to(torch.float64))
            rows = 7
        small = [t.reshape(-1) for t in tensors if t.numel() <= SMALL]
        if small:
            parts.append(torch.cat(small).to(torch.float64))
        data = torch.cat(parts)
    return Block(dtype, slots, owner, [t.numel() for t in tensors], bases,
                 sum(s.numel() for s in small), rows, data, list(tensors) if held else None)


def _reduce_grouped(tensors: list[torch.Tensor], slots: list[int],
                    bases: list[dict[str, Any]]) -> Block:
    """``reduce`` in a fixed number of multi-tensor kernels (``summary.grouped``); the block
    holds nothing: its float64 norms are computed with it."""
    from backstep.engine.summary.format import SMALL
    from backstep.engine.summary.host import memory_key as _memory_key

    unique: dict[tuple, int] = {}
    reps: list[torch.Tensor] = []
    dense: list[bool] = []
    owner: list[int] = []
    small: list[torch.Tensor] = []
    for t in tensors:
        n = t.numel()
        key = _memory_key(t)
        j = unique.get(key) if key is not None and n > SMALL else None
        if j is None:
            j = len(reps)
            reps.append(t)
            dense.append(key is not None)
            if key is not None and n > SMALL:
                unique[key] = j
        owner.append(j)
        if n <= SMALL:
            small.append(t if t.dim() else t.view(1))
    with torch.no_grad():
        data, column = grouped.stats(reps, dense)
        owner = [column[j] for j in owner]
        if small:
            values = torch._chunk_cat(small, 0, 1).view(-1)
            data = torch.cat([data, values.to(torch.float64)])
    return Block(tensors[0].dtype, slots, owner, [t.numel() for t in tensors], bases,
                 sum(s.numel() for s in small), grouped.ROWS, data, None, grouped=True)


def count_nonfinite(t: torch.Tensor) -> torch.Tensor:
    """The exact non-finite count of ``t``, on its device, with a bounded temporary."""
    if t.numel() <= COUNT_CHUNK:
        return _count_piece(t)
    # float32 for most: exact per piece (at most 2^24 values), added up in float64
    return torch.stack([_count_piece(piece) for piece in slabs(t, COUNT_CHUNK)]).sum(
        dtype=torch.float64)


def _count_piece(t: torch.Tensor) -> torch.Tensor:
    """NaN and Inf counted through one float temporary: ``t * 0`` is NaN exactly there, and the
    L0 norm counts what is not 0 (half and bfloat16 counted in float32: exact past 2,048).

    Not ``isfinite(t).logical_not_().sum()``: ``isfinite`` is built of ``abs`` and comparisons,
    and a CUDA sum of bools first copies them to int64, 9 bytes a value in all; with 4M-value
    pieces that made a traced GPT-2 pass (H200) peak 36 MiB above plain's 256."""
    wide = torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else None
    return torch.linalg.vector_norm(t * 0, 0, dtype=wide)


class Arrivals:
    """Tensors reduced as they were added to a batch (too big to hold), keyed by identity.

    A weak reference tells a tensor added again (one node's output gradient is the next node's
    input) from a new tensor that reuses a dead one's ``id``, and the version counter tells it
    from the same tensor changed since: the engine sums a node's incoming gradients in place
    into the first one when nothing else holds it, as nothing does once it has arrived here.

    A tensor added alone (``add``: bigger than the held budget) costs its per-tensor kernels
    and nothing else: its 0-d results wait in ``pending`` and join one stack per dtype at the
    read (``finish``), as a held group's do, rather than a stack, a cast and a concatenation
    of its own; its non-finite count's pieces are added up on the host.
    """

    __slots__ = ("blocks", "refs", "pending")

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.refs: dict[int, tuple[Any, int, int]] = {}
        self.pending: dict[tuple[torch.dtype, torch.device], list[Pending]] = {}

    def find(self, t: torch.Tensor) -> int | None:
        hit = self.refs.get(id(t))
        if hit is not None and hit[0]() is t and hit[2] == t._version:
            return hit[1]
        return None

    def add(self, t: torch.Tensor, slot: int, base: dict[str, Any]) -> None:
        item = _pending(t, slot, base)
        self.pending.setdefault((t.dtype, t.device), []).append(item)
        self._remember([slot], [t])

    def settle(self, slots: list[int], tensors: list[torch.Tensor],
               bases: list[dict[str, Any]]) -> None:
        """Reduce same-dtype tensors now (queued, nothing read) and keep only their statistics."""
        self.blocks.append(reduce(tensors, slots, bases, held=False))
        self._remember(slots, tensors)

    def _remember(self, slots: list[int], tensors: list[torch.Tensor]) -> None:
        for slot, t in zip(slots, tensors, strict=True):
            try:
                self.refs[id(t)] = (weakref.ref(t), slot, t._version)
            except TypeError:
                pass

    def all_blocks(self, results: list[dict[str, Any] | None]) -> list[Block]:
        """``blocks`` and one block per dtype and device of the ``pending`` arrivals (their
        stacks queued now; nothing read). A group that cannot be stacked says so in
        ``results``."""
        out = list(self.blocks)
        with torch.no_grad():
            for items in self.pending.values():
                try:
                    out.append(_pending_block(items))
                except Exception as exc:  # noqa: BLE001 - a summary must never break the pass
                    for p in items:
                        results[p.slot] = _failed(dict(p.base), exc)
        self.pending = {}
        return out


class Pending:
    """One tensor's statistics queued on arrival, 0-d device tensors until the read: min, max,
    norm and sum from the per-tensor kernels (float16 also its float32-accumulated norm and
    sum), the non-finite count in pieces, and the values of a small tensor (copied: a view
    would keep its storage alive)."""

    __slots__ = ("slot", "base", "n", "stats", "wide", "pieces", "values")

    def __init__(self, slot: int, base: dict[str, Any], n: int, stats: list[torch.Tensor],
                 wide: list[torch.Tensor], pieces: list[torch.Tensor],
                 values: torch.Tensor | None) -> None:
        self.slot = slot
        self.base = base
        self.n = n
        self.stats = stats
        self.wide = wide
        self.pieces = pieces
        self.values = values


def _pending(t: torch.Tensor, slot: int, base: dict[str, Any]) -> Pending:
    """The kernels of one arriving tensor: ``aminmax``, ``_foreach_norm``, ``sum`` (the
    per-tensor path's own) and two per count piece (``count_pieces``); nothing stacked."""
    from backstep.engine.summary.format import SMALL

    with torch.no_grad():
        lo, hi = t.aminmax()
        (norm,) = torch._foreach_norm([t])
        stats = [lo, hi, norm, t.sum()]
        wide: list[torch.Tensor] = []
        if t.dtype == torch.float16:
            (norm32,) = torch._foreach_norm([t], 2, dtype=torch.float32)
            wide = [norm32, t.sum(dtype=torch.float32)]
        pieces = count_pieces(t)
        n = t.numel()
        values = t.reshape(-1).to(torch.float64) if n <= SMALL else None
    return Pending(slot, base, n, stats, wide, pieces, values)


def count_pieces(t: torch.Tensor) -> list[torch.Tensor]:
    """The non-finite counts of views that cover ``t`` once (their sum is its count), each
    through a temporary of at most ``ARRIVAL_PIECE`` bytes: two kernels a piece (``_count_piece``),
    float32 counts exact (a piece has at most 2^24 values)."""
    from backstep.engine.summary.format import slabs

    n = t.numel()
    limit = max(1, min(ARRIVAL_PIECE // t.element_size(), COUNT_CHUNK_MAX))
    if n <= limit:
        return [_count_piece(t)]
    if t.is_contiguous():
        return [_count_piece(piece) for piece in t.view(-1).split(limit)]
    return [_count_piece(piece) for piece in slabs(t, limit)]


def _pending_block(items: list[Pending]) -> Block:
    """The ``Block`` of same-dtype arrivals: their rows stacked once (min, max, norm, sum,
    float16's float32 norm and sum), then every count piece, then the small values: a few
    stacks and casts whatever their number. ``pieces`` says how many count pieces each has."""
    rows = [[p.stats[r] for p in items] for r in range(4)]
    parts = [torch.stack([x for row in rows for x in row]).to(torch.float64)]
    wide = bool(items[0].wide)
    if wide:
        parts.append(torch.stack([p.wide[r] for r in range(2) for p in items]).to(torch.float64))
    parts.append(torch.stack([c for p in items for c in p.pieces]).to(torch.float64))
    small = [p.values for p in items if p.values is not None]
    if small:
        parts.append(torch.cat(small))
    block = Block(items[0].stats[0].dtype, [p.slot for p in items], list(range(len(items))),
                  [p.n for p in items], [p.base for p in items],
                  sum(v.numel() for v in small), 7 if wide else 5, torch.cat(parts), None)
    block.pieces = [len(p.pieces) for p in items]
    return block


def _counts_in_place(b: Block, part: list[float]) -> list[float]:
    """A pending block's read laid out as ``reduce``'s: its count pieces added up into the
    non-finite row (exact: integers below 2^53), after the four statistics' rows."""
    assert b.pieces is not None
    m = len(b.pieces)
    stored = (b.rows - 1) * m
    counts = part[stored: stored + sum(b.pieces)]
    bad: list[float] = []
    pos = 0
    for k in b.pieces:
        bad.append(float(sum(counts[pos: pos + k])))
        pos += k
    return part[: 4 * m] + bad + part[4 * m: stored] + part[stored + len(counts):]


def finish(groups: dict[tuple[torch.dtype, torch.device], list[tuple[int, torch.Tensor]]],
           arrivals: Arrivals, results: list[dict[str, Any] | None]) -> None:
    """Reduce the held groups, read every block back (one transfer per device), fill
    ``results``."""
    from backstep.engine.rounding import DIGITS, round_digits
    from backstep.engine.summary.format import base_summary

    blocks: dict[torch.device, list[Block]] = {}
    for block in arrivals.all_blocks(results):
        blocks.setdefault(block.data.device, []).append(block)
    for (_, device), items in groups.items():
        tensors = [t for _, t in items]
        try:
            block = reduce(tensors, [s for s, _ in items], [base_summary(t) for t in tensors], held=True)
        except Exception as exc:  # noqa: BLE001 - a summary must never break the user's pass
            for slot, t in items:
                results[slot] = _failed(base_summary(t), exc)
            continue
        blocks.setdefault(device, []).append(block)
    for device_blocks in blocks.values():
        try:
            host = transfers.to_host(torch.cat([b.data for b in device_blocks]))
        except Exception as exc:  # noqa: BLE001
            for b in device_blocks:
                for slot, base in zip(b.slots, b.bases, strict=True):
                    results[slot] = _failed(dict(base), exc)
            continue
        redo: list[tuple[Block, int, int, list[float]]] = []
        rounded: dict[int, list[float]] = {}  # digits -> the whole read rounded (one go each)
        values = host.tolist()  # one list, sliced per block: no tensor op per block
        offset = 0
        for b in device_blocks:
            size = b.data.numel()
            digits = None if b.grouped else DIGITS.get(b.dtype)
            shown = None
            if digits:
                if digits not in rounded:
                    rounded[digits] = round_digits(host, digits).tolist()
                shown = rounded[digits][offset: offset + size]
            part = values[offset: offset + size]
            if b.pieces is not None:
                part = _counts_in_place(b, part)
                shown = _counts_in_place(b, shown) if shown is not None else None
            _fill(b, part, shown, results, redo)
            offset += size
        if redo:
            _redo_float64(redo, results)


def _failed(out: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    out["note"] = f"summary failed: {type(exc).__name__}"
    return out


def _fill(b: Block, host: list[float], rounded: list[float] | None,
          results: list[dict[str, Any] | None],
          redo: list[tuple[Block, int, int, list[float]]]) -> None:
    """One block's summaries from its part of the read (``rounded``: the same part rounded to
    the dtype's digits, or None where the dtype has none)."""
    from backstep.engine.rounding import put_extremes, stat_value
    from backstep.engine.summary.format import value_list

    m = (len(host) - b.small) // b.rows
    rows = [host[r * m: (r + 1) * m] for r in range(b.rows)]
    small_values = host[b.rows * m:]
    dtype = b.dtype
    if b.grouped:
        _fill_grouped(b, rows, small_values, results)
        return
    shown = ([rounded[r * m: (r + 1) * m] for r in range(4)] if rounded is not None
             else rows[:4])
    mins, maxs, norm_list, sum_list, bad_list = rows[:5]
    pos = 0
    for k, (slot, j, n) in enumerate(zip(b.slots, b.owner, b.numels, strict=True)):
        lo, hi, norm, total = mins[j], maxs[j], norm_list[j], sum_list[j]
        values = None
        if n <= 16:
            values = value_list(small_values[pos: pos + n], dtype)
            pos += n
        finite = math.isfinite(lo) and math.isfinite(hi)
        overflowed = finite and not (math.isfinite(norm) and math.isfinite(total))
        out = dict(b.bases[k])
        if overflowed and b.tensors is not None:
            redo.append((b, k, j, [lo, hi]))
            results[slot] = out
            if values is not None:
                out["values"] = values
            continue
        if overflowed:
            if b.rows == 7:  # a float16 arrival: accumulated in float32 in advance
                norm, total = rows[5][j], rows[6][j]
            else:
                out["note"] = "norm/sum overflowed float32 on the device"
        put_extremes(out, (shown[0][j], shown[1][j], shown[2][j])
                     if finite and not overflowed else None, lo, hi, norm, dtype)
        out["mean"] = stat_value(total / n, dtype)
        out["nonfinite"] = 0 if finite else int(bad_list[j])
        if values is not None:
            out["values"] = values
        results[slot] = out


def _fill_grouped(b: Block, rows: list[list[float]], small_values: list[float],
                  results: list[dict[str, Any] | None]) -> None:
    """``_fill`` of a block from ``summary.grouped``: each figure rounded alone (``stat_value``), as
    the host path writes the few that it does not round in bulk (same numbers)."""
    from backstep.engine.rounding import put_extremes, stat_value
    from backstep.engine.summary.format import value_list

    dtype = b.dtype
    pos = 0
    for k, (slot, j, n) in enumerate(zip(b.slots, b.owner, b.numels, strict=True)):
        lo, hi, norm, total, bad, wide = grouped.summary_row(rows, j, n, dtype)
        finite = math.isfinite(lo) and math.isfinite(hi)
        if finite and not math.isfinite(norm):
            norm = wide  # a finite tensor's norm past its dtype: the host path's float64 redo
        out = dict(b.bases[k])
        put_extremes(out, None, lo, hi, norm, dtype)
        out["mean"] = stat_value(total / n, dtype)
        out["nonfinite"] = 0 if finite else int(bad)
        if finite and not math.isfinite(total):
            out["note"] = "sum overflowed float64 on the device"
        if n <= 16:
            out["values"] = value_list(small_values[pos: pos + n], dtype)
            pos += n
        results[slot] = out


def _redo_float64(redo: list[tuple[Block, int, int, list[float]]],
                  results: list[dict[str, Any] | None]) -> None:
    """Finite held tensors whose norm or sum overflowed their dtype, redone in float64 as the
    host path does: all of them in one more read."""
    from backstep.engine.rounding import stat_value

    with torch.no_grad():
        stacked = []
        for b, k, _, _ in redo:
            assert b.tensors is not None
            t = b.tensors[k].detach()
            stacked.append(torch.linalg.vector_norm(t, dtype=torch.float64))
            stacked.append(t.sum(dtype=torch.float64))
        by_device: dict[torch.device, list[int]] = {}
        for index, value in enumerate(stacked[::2]):
            by_device.setdefault(value.device, []).append(index)
        values: list[float] = [0.0] * len(stacked)
        for indices in by_device.values():
            got = transfers.read(torch.stack([stacked[2 * i + h] for i in indices for h in (0, 1)]))
            for position, i in enumerate(indices):
                values[2 * i], values[2 * i + 1] = got[2 * position], got[2 * position + 1]
    for index, (b, k, _, (lo, hi)) in enumerate(redo):
        out = results[b.slots[k]]
        assert out is not None
        norm, total = values[2 * index], values[2 * index + 1]
        dtype = b.dtype
        out["min"] = stat_value(lo, dtype)
        out["max"] = stat_value(hi, dtype)
        out["norm"] = stat_value(norm, dtype)
        out["mean"] = stat_value(total / b.numels[k], dtype)
        out["nonfinite"] = 0
        if "values" in out:
            out["values"] = out.pop("values")  # keep the key order of the host path
