"""Grouped device reductions (``summary.grouped``) against the per-tensor path, exhaustively.

Run on CPU with ``summary_device.FORCE``: every batched dtype, contiguous and strided, 0-dim,
one-element, small and larger tensors, with NaN, Inf, overflowing and subnormal values, and the
tensors the batched kernels never take (empty, complex, integer, bool), which keep their
careful path. Every figure is the per-tensor path's, but a mean may differ by the
reduction-order tolerance (its sum is added up in another order).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from backstep.engine import transfers
from backstep.engine.summary import SummaryBatch, grouped
from backstep.engine.summary import device as summary_device
from tests.summary_checks import agree, batch_summaries

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def layouts(v: torch.Tensor) -> list[torch.Tensor]:
    """``v`` (120 values) as tensors of many shapes and strides, small and not."""
    return [
        v, v[0].clone(), v[:1], v[:5], v[:16], v[:17], v.view(12, 10), v.view(12, 10).t(),
        v.view(12, 10)[:, :3], v.view(12, 10)[::2], v.view(2, 3, 20).permute(2, 0, 1),
        v.view(4, 30)[:, ::7], v.reshape(1, 120).expand(3, 120)[1], v[7:8].view(()),
    ]


def values(kind: str, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash(kind) % 1000)
    v = torch.randn(120, generator=g, dtype=torch.float64)
    if kind == "nan":
        v[::9] = math.nan
    elif kind == "inf":
        v[3::11] = math.inf
    elif kind == "-inf":
        v[5::13] = -math.inf
    elif kind == "both":
        v[3::11] = math.inf
        v[5::13] = -math.inf
    elif kind == "huge":  # finite, but the norm (and for half the sum) overflows the dtype
        v = v.sign() * torch.finfo(dtype).max * 0.75
    elif kind == "tiny":
        v = v * torch.finfo(dtype).tiny
    elif kind == "ones":
        v = torch.ones(120, dtype=torch.float64)
    return v.to(dtype)


KINDS = ["plain", "nan", "inf", "-inf", "both", "huge", "tiny", "ones"]


def cases(dtype: torch.dtype) -> list[torch.Tensor]:
    return [t for kind in KINDS for t in layouts(values(kind, dtype))]


def others() -> list[torch.Tensor]:
    return [torch.empty(0), torch.empty(3, 0), torch.randn(4, dtype=torch.cfloat),
            torch.randn(3, 2, dtype=torch.complex128).t(), torch.arange(6), torch.tensor(3),
            torch.ones(2, dtype=torch.bool), torch.randn(5).to_sparse()]


@pytest.fixture
def grouped_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_device, "FORCE", True)
    monkeypatch.setattr(summary_device, "GROUPED", True)
    monkeypatch.setattr(summary_device, "HELD_BYTES", 1 << 20)  # all of them in one group
    monkeypatch.setattr(summary_device, "GROUP_MIN", 1)  # however few


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_summaries_equal_the_per_tensor_ones(grouped_path: None,
                                                     dtype: torch.dtype) -> None:
    items = cases(dtype) + others()
    summary_device.FORCE = False
    host = batch_summaries(items)
    summary_device.GROUPED = False
    summary_device.FORCE = True
    per_tensor = batch_summaries(items)
    assert per_tensor == host
    summary_device.GROUPED = True
    got = batch_summaries(items)
    said = [g for g, w in zip(got, host, strict=True) if "note" in g and "note" not in w]
    # float64 values near its limit: one sign's sum past float64 is said, never made up
    assert all(g["note"] == "sum overflowed float64 on the device" and g["dtype"] == "float64"
               for g in said)
    bad = [(list(t.shape), t.stride(), g, w) for t, g, w in zip(items, got, host, strict=True)
           if "note" not in g and not agree([g], [w], [t])]
    assert not bad
    # the counts, extremes, norms and values are the per-tensor kernels' own numbers
    for g, w in zip(got, host, strict=True):
        assert {k: v for k, v in g.items() if k not in ("mean", "note")} == {
            k: v for k, v in w.items() if k not in ("mean", "note")}
    assert len(said) <= 12


def test_every_dtype_in_one_batch_reads_once(grouped_path: None) -> None:
    items = [t for dtype in DTYPES for t in cases(dtype)]  # others() read on the careful path
    summary_device.FORCE = False
    host = batch_summaries(items)
    summary_device.FORCE = True
    before = transfers.count()
    got = batch_summaries(items)
    assert transfers.count() - before == 1
    assert all(agree([g], [w], [t]) for g, w, t in zip(got, host, items, strict=True)
               if "note" not in g)


def test_sums_of_non_finite_tensors_follow_their_extremes() -> None:
    f32 = torch.float32
    assert math.isnan(grouped.total(1.0, 0.0, math.nan, 1.0, f32))
    assert math.isnan(grouped.total(math.inf, math.inf, -math.inf, math.inf, f32))
    assert grouped.total(math.inf, 0.0, 1.0, math.inf, f32) == math.inf
    assert grouped.total(math.inf, math.inf, -math.inf, 1.0, f32) == -math.inf
    assert grouped.total(3.0, 1.0, -1.0, 2.0, f32) == 2.0  # positives minus negatives
    big = 3.0 * float(torch.finfo(torch.float16).max)  # past half: the float64 sum, as redone
    assert grouped.total(big, 0.0, 1.0, 2.0, torch.float16) == big
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = 1.0 + 1e-3 + 1e-9
        assert grouped.total(x, 0.0, 0.0, 2.0, dtype) == torch.tensor(x).to(dtype).item()


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.ords: list[Any] = []  # the ord of each _foreach_norm

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func))
        if "_foreach_norm" in str(func):
            self.ords.append(args[1] if len(args) > 1 else 2)
        return func(*args, **(kwargs or {}))


def _block_ops(items: list[torch.Tensor]) -> list[str]:
    with _Ops() as ops:
        summary_device.reduce(items, list(range(len(items))), [{}] * len(items), held=True)
    return ops.names


def test_a_grouped_block_costs_the_same_kernels_for_any_number_of_tensors(
        grouped_path: None) -> None:
    torch.manual_seed(0)
    few = [torch.randn(50, 40) for _ in range(3)]
    many = [torch.randn(50, 40) for _ in range(60)] + [torch.randn(30).t() for _ in range(20)]
    assert _block_ops(few) == _block_ops(many)
    assert len(_block_ops(many)) <= 19  # 13 multi-tensor kernels, the rest stacks and views
    # every reduction is a _foreach_ norm or max, with ords CUDA's multi-tensor route takes
    kernels = [name for name in _block_ops(many) if "_foreach" in name]
    assert len(kernels) == 13 and "aten.linalg_vector_norm.default" not in _block_ops(many)
    with _Ops() as ops:
        summary_device.reduce(many, list(range(len(many))), [{}] * len(many), held=True)
    assert set(ops.ords) <= {1, 2}, "an ord-0 norm launches per tensor on CUDA"
    mixed = many + [torch.randn(40, 50)[:, :7] for _ in range(10)]  # strided: a second call
    assert len(_block_ops(mixed)) <= 2 * 19 + 3
    summary_device.GROUPED = False
    assert len(_block_ops(many)) >= 2 * len(many), "the per-tensor path launches per tensor"


def test_a_block_of_few_tensors_is_reduced_per_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_device, "GROUPED", True)
    few = [torch.randn(50, 40) for _ in range(summary_device.GROUP_MIN - 1)]
    grouped_op = "aten._foreach_max.default"
    assert grouped_op not in _block_ops(few), "fewer ops per tensor than a grouped block"
    assert grouped_op in _block_ops(few + [torch.randn(3)])


def test_a_torch_without_the_multi_tensor_ops_takes_the_per_tensor_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert grouped.available()
    for name in ("_foreach_max", "_foreach_clamp_min_", "_chunk_cat"):
        with monkeypatch.context() as m:
            m.delattr(torch, name)
            assert not grouped.available()


@pytest.mark.parametrize("dense,strided", list(itertools.product([0, 2, 5], [0, 1, 4]))[1:])
def test_dense_and_strided_tensors_keep_their_columns(grouped_path: None, dense: int,
                                                      strided: int) -> None:
    torch.manual_seed(dense * 10 + strided)
    base = [torch.randn(6, 8) for _ in range(dense + strided)]
    items = [t if k % 2 == 0 or k // 2 >= strided else t[:, :5] for k, t in enumerate(base)]
    summary_device.FORCE = False
    host = batch_summaries(items)
    summary_device.FORCE = True
    assert agree(batch_summaries(items), host, items)


# --- tensors bigger than the held budget: reduced on arrival, their results read with the rest


@pytest.fixture
def arriving(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device path forced on, a held budget of 2,000 bytes (the 3,000-value tensors below
    arrive; the 120-value ones are held and grouped) and count pieces of 1 KiB."""
    monkeypatch.setattr(summary_device, "FORCE", True)
    monkeypatch.setattr(summary_device, "GROUPED", True)
    monkeypatch.setattr(summary_device, "HELD_BYTES", 2000)
    monkeypatch.setattr(summary_device, "GROUP_MIN", 1)
    monkeypatch.setattr(summary_device, "ARRIVAL_PIECE", 1024)


def large_layouts(v: torch.Tensor) -> list[torch.Tensor]:
    """``v`` (3,000 values) contiguous, transposed, strided, expanded and sliced."""
    return [v, v.view(60, 50).t(), v.view(60, 50)[:, ::3], v.view(3, 20, 50).permute(2, 0, 1),
            v.reshape(1, 3000).expand(2, 3000), v[1:2999], v.view(60, 50)[::2]]


def large_values(kind: str, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash(kind) % 1000)
    v = torch.randn(3000, generator=g, dtype=torch.float64)
    if kind == "nan":
        v[::3] = math.nan  # 1,000 NaN, in every piece
    elif kind == "spread":
        v[3::11] = math.inf
        v[5::13] = -math.inf
        v[7::17] = math.nan
    elif kind == "one":
        v[2500] = math.nan  # one, in the last pieces only
    elif kind == "all":
        v[:] = math.inf
    elif kind == "huge":  # finite; float16's norm and sum overflow (its float32 ones do not)
        v = v.sign() * 60000.0
    elif kind == "tiny":
        v = v * torch.finfo(dtype).tiny
    return v.to(dtype)


LARGE_KINDS = ["plain", "nan", "spread", "one", "all", "tiny"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensors_reduced_on_arrival_equal_the_per_tensor_ones(arriving: None,
                                                              dtype: torch.dtype) -> None:
    kinds = LARGE_KINDS + (["huge"] if dtype == torch.float16 else [])
    items = [t for kind in kinds for t in large_layouts(large_values(kind, dtype))]
    items += cases(dtype)[::5]  # held and grouped
    careful = others() + [torch.randn(40, 30, dtype=torch.cfloat).t()]  # read chunk by chunk
    summary_device.FORCE = False
    host = batch_summaries(items + careful)
    summary_device.FORCE = True
    batch = SummaryBatch()
    slots = [batch.add(t) for t in items]
    assert batch._arrivals is not None
    arrived = sum(map(len, batch._arrivals.pending.values()))
    assert arrived >= len(kinds) * 7, "every large tensor reduced on arrival"
    before = transfers.count()
    results = batch.compute()
    assert transfers.count() - before == 1, "arrivals and held blocks: one read"
    got = [results[s] for s in slots if s is not None] + batch_summaries(careful)
    items += careful
    # an arrival's figures are the per-tensor kernels' own (aminmax, norm, sum in the dtype) and
    # its count's pieces add up exactly: equal to the host path's, the mean included
    assert got[: arrived] == host[: arrived]
    # the held ones as in the test above (float64 near its limit: a note, never made up)
    kept = [(g, w, t) for g, w, t in zip(got, host, items, strict=True)
            if "note" not in g or "note" in w]
    assert len(kept) >= len(items) - 3
    assert agree(*map(list, zip(*kept, strict=True)))


def test_an_arrival_costs_its_per_tensor_kernels_and_its_pieces(arriving: None) -> None:
    t = torch.randn(3000)  # 12,000 bytes: 12 count pieces of 1 KiB
    batch = SummaryBatch()
    with _Ops() as ops:
        batch.add(t)
    pieces = math.ceil(t.numel() * 4 / 1024)
    assert ops.names.count("aten.linalg_vector_norm.default") == pieces
    assert ops.names.count("aten.mul.Tensor") == pieces
    assert len(ops.names) <= 3 + 2 * pieces + 2  # aminmax, norm, sum; a view and a split
    assert not {"aten.stack.default", "aten.cat.default", "aten._to_copy.default"} & set(
        ops.names), "stacked once per dtype at the read, not per arrival"
    with _Ops() as ops:
        for _ in range(10):
            batch.add(torch.randn(600))
        results = batch.compute()
    assert results[0] is not None and results[0]["nonfinite"] == 0
    assert ops.names.count("aten.stack.default") <= 4


class _Temporaries(TorchDispatchMode):
    """The largest storage an op allocates (one that none of its inputs has)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        flat = list(args) + [a for a in args if isinstance(a, (list, tuple))
                             for a in a] + list((kwargs or {}).values())
        inputs = {a.untyped_storage().data_ptr() for a in flat if isinstance(a, torch.Tensor)}
        outs = out if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, o.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_arrivals_temporary_is_bounded_by_the_piece_budget(
        monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    monkeypatch.setattr(summary_device, "FORCE", True)
    monkeypatch.setattr(summary_device, "HELD_BYTES", 1 << 18)
    big = torch.randn(1 << 20).to(dtype)  # 2-8 MiB (a third of it strided): past the budget
    big[::1000] = math.nan
    big[7::999] = -math.inf
    for t in (big, big.view(1024, 1024).t(), big.view(1024, 1024)[:, ::3]):
        size = t.numel() * t.element_size()
        batch = SummaryBatch()
        with _Temporaries() as tally:
            slot = batch.add(t)  # the default budget: one piece, the tensor's size
        assert batch._arrivals is not None and tally.largest <= min(size, 16 << 20)
        monkeypatch.setattr(summary_device, "ARRIVAL_PIECE", 1 << 19)
        copy = t.clone()
        with _Temporaries() as tally:
            other = batch.add(copy)
        monkeypatch.setattr(summary_device, "ARRIVAL_PIECE", 16 << 20)
        assert tally.largest <= 1 << 19 < size
        results = batch.compute()
        want = int((~torch.isfinite(t)).sum())
        assert results[slot]["nonfinite"] == results[other]["nonfinite"] == want > 300


def test_arrivals_that_cannot_be_stacked_say_so(arriving: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    batch = SummaryBatch()
    slot = batch.add(torch.randn(3000))
    held = batch.add(torch.randn(20))

    def broken(items: list[Any]) -> Any:
        raise RuntimeError("no")

    monkeypatch.setattr(summary_device, "_pending_block", broken)
    results = batch.compute()
    assert results[slot]["note"] == "summary failed: RuntimeError"
    assert results[slot]["shape"] == [3000] and results[held]["nonfinite"] == 0
