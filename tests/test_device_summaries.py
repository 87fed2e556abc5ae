"""Summaries of accelerator tensors: reduced on the device, one read per batch, same values.

The device path runs here on CPU tensors with ``summary_device.FORCE`` on, and its reads are
counted by ``transfers``: a CUDA run makes exactly those reads, each a host sync.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backstep.engine import rounding, transfers
from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from backstep.engine.summary import SummaryBatch, single
from backstep.engine.summary import batch as summary_batch
from backstep.engine.summary import device as summary_device
from tests.engine_fixtures import captured
from tests.summary_checks import _same_up_to_reduction_order, agree, batch_summaries


@pytest.fixture(params=[True, False], ids=["grouped", "per-tensor"])
def device_path(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """The device path forced on, reducing blocks grouped (``summary.grouped``) or per tensor
    (today's path, which a torch without the multi-tensor ops falls back to)."""
    monkeypatch.setattr(summary_device, "FORCE", True)
    monkeypatch.setattr(summary_device, "GROUPED", request.param)
    yield


def tensors() -> list[torch.Tensor]:
    torch.manual_seed(0)
    base = torch.randn(64, 48)
    out = [
        base, base.t(), base[:, :5], base.reshape(-1)[:7], torch.randn(3),
        torch.tensor(2.5), torch.tensor([1.0, math.nan, math.inf, -math.inf, 4.0]),
        torch.full((40,), math.nan), torch.full((3, 3), 3e38), torch.full((70,), 1e30),
        torch.randn(1000) * 1e-30,
    ]
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        out += [t.to(dtype) for t in out[:8]]
    out += [torch.full((50,), 60000.0, dtype=torch.float16),  # norm and sum overflow fp16
            torch.tensor([65504.0, 65504.0], dtype=torch.float16),
            torch.arange(6), torch.ones(2, dtype=torch.bool), torch.randn(4, dtype=torch.cfloat),
            torch.empty(0), torch.randn(5).to_sparse()]
    return out


def _huge(t: torch.Tensor) -> bool:
    """Finite values whose float32 norm overflows (only float16 is redone on arrival)."""
    return (t.is_floating_point() and t.dtype != torch.float16 and t.layout == torch.strided
            and t.numel() > 0 and float(t.nan_to_num(0.0, 0.0, 0.0).abs().max()) > 1e18)


def test_device_path_summaries_equal_the_host_paths(device_path: None) -> None:
    items = tensors()
    summary_device.FORCE = False
    host = batch_summaries(items)
    summary_device.FORCE = True
    assert agree(batch_summaries(items), host, items)
    assert agree([single.summarize(t) for t in items], host, items)


def test_tensors_reduced_on_arrival_equal_held_ones(device_path: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    items = [t for t in tensors() if not _huge(t)]
    summary_device.FORCE = False
    host = batch_summaries(items)
    summary_device.FORCE = True
    monkeypatch.setattr(summary_device, "HELD_BYTES", 0)  # nothing fits: every one arrives
    monkeypatch.setattr(summary_device, "COUNT_CHUNK", 100)  # counted in several pieces
    monkeypatch.setattr(summary_device, "ARRIVAL_PIECE", 400)  # (arrivals: bytes a piece)
    batch = SummaryBatch()
    slots = [batch.add(t) for t in items]
    assert batch._arrivals is not None
    assert sum(map(len, batch._arrivals.pending.values())) + len(batch._arrivals.blocks) >= 20
    others = sum(t.element_size() * t.numel() for t in items if not summary_batch._batchable(t))
    assert batch.nbytes == others, "device tensors never push a batch to flush early"
    results = batch.compute()
    kept = [t for t, s in zip(items, slots, strict=True) if s is not None]
    assert agree([results[s] for s in slots if s is not None], host, kept)


def test_held_tensors_past_the_budget_are_reduced_together_and_let_go(
        device_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    items = [torch.randn(200) for _ in range(30)] + [torch.randn(30).double() for _ in range(4)]
    summary_device.FORCE = False
    host = batch_summaries(items)
    summary_device.FORCE = True
    monkeypatch.setattr(summary_device, "HELD_BYTES", 4 << 10)  # five 800-byte tensors fit
    batch = SummaryBatch()
    slots = [batch.add(t) for t in items]
    assert batch._arrivals is not None
    assert 5 <= len(batch._arrivals.blocks) <= 8, "reduced a group at a time, not one by one"
    assert sum(t is not None for t in batch._tensors) <= 5, "let go once reduced"
    assert batch.add(items[0]) == slots[0], "a tensor seen again keeps its slot"
    results = batch.compute()
    assert agree([results[s] for s in slots if s is not None], host, items)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_non_finite_counts_are_exact_in_every_dtype_and_piece(
        dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    values = torch.randn(9000).to(dtype)
    values[::3] = math.nan  # 3,000 NaN: past what float16 counts exactly (2,048)
    values[1::7] = math.inf
    values[2::11] = -math.inf
    want = int((~torch.isfinite(values)).sum())
    assert int(summary_device.count_nonfinite(values)) == want
    monkeypatch.setattr(summary_device, "COUNT_CHUNK", 1000)  # counted in nine pieces
    assert int(summary_device.count_nonfinite(values)) == want
    assert int(summary_device.count_nonfinite(values.view(90, 100).t())) == want


def test_overflow_on_arrival_is_said_not_hidden(device_path: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_device, "HELD_BYTES", 0)
    t = torch.full((70,), 1e30)
    (out,) = batch_summaries([t])  # bigger than the budget: reduced alone, per tensor
    assert out is not None and out["norm"] == "inf" and "overflowed" in out["note"]
    assert out["min"] == out["max"] == 1e30 and out["nonfinite"] == 0


def test_a_grouped_block_carries_its_float64_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_device, "FORCE", True)
    monkeypatch.setattr(summary_device, "HELD_BYTES", 300)  # held, then settled as a group
    monkeypatch.setattr(summary_device, "GROUP_MIN", 1)
    items = [torch.full((70,), 1e30), torch.full((20,), 2e30), torch.ones(3)]
    batch = SummaryBatch()
    slots = [batch.add(t) for t in items]
    assert batch._arrivals is not None and batch._arrivals.blocks[0].grouped
    assert all(b.tensors is None for b in batch._arrivals.blocks), "nothing held for a redo"
    results = batch.compute()
    summary_device.FORCE = False
    want = batch_summaries(items)
    assert [results[s] for s in slots] == want  # these sums are exact in any order
    wide = float(torch.linalg.vector_norm(items[0], dtype=torch.float64))
    assert want[0]["norm"] == rounding.stat_value(wide, torch.float32) != "inf"


def test_a_tensor_changed_in_place_after_arriving_is_reduced_again(
        device_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_device, "HELD_BYTES", 0)
    t = torch.ones(4)
    batch = SummaryBatch()
    first = batch.add(t)
    assert batch.add(t) == first
    t.add_(1.0)  # what the engine does to a gradient buffer nothing else holds
    second = batch.add(t)
    results = batch.compute()
    assert results[first]["values"] == [1.0] * 4 and results[second]["values"] == [2.0] * 4


def test_large_tensors_are_reduced_on_the_device_not_chunk_by_chunk(
        device_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_batch, "LARGE", 1000)
    big = torch.randn(5000)
    before = transfers.count()
    (out,) = batch_summaries([big])
    assert transfers.count() - before == 1
    assert out is not None and out["nonfinite"] == 0
    assert out["max"] == rounding.stat_value(float(big.max()), big.dtype)


def chain(n: int) -> torch.Tensor:
    """A graph of about ``n`` nodes: several dtypes, gradients large and small, one NaN."""
    torch.manual_seed(1)
    big = torch.randn(120, 120, requires_grad=True)
    small = torch.randn(8, requires_grad=True)
    x, y = big, small
    for k in range(n // 10):
        x = (x * 1.001).tanh()
        x = x.to(torch.float16).float() if k % 3 else x.double().float()
        y = (y.bfloat16() * 2).float().sin()
        y = y + x[0, :8] * 1e-3
    y = torch.where(y > 10, y.log(), y)  # the NaN of log(negative) masked out: NaN in backward
    return x.sum() + y.sum() + (small * torch.tensor(math.inf)).nan_to_num().sum()


@pytest.mark.parametrize("held", [8 << 20, 16 << 10])
def test_a_recorded_pass_reads_once_per_batch(device_path: None, monkeypatch: pytest.MonkeyPatch,
                                              held: int) -> None:
    monkeypatch.setattr(summary_device, "HELD_BYTES", held)
    loss = chain(900)
    recorder = ListRecorder()
    with captured(Capture(recorder)):
        before = transfers.count()
        loss.backward()
        reads = transfers.count() - before
    (begin,) = recorder.of("pass_begin")
    nodes = len(begin["nodes"])
    assert nodes > 700
    assert reads <= math.ceil(nodes / 256) + 4, (reads, nodes)
    sizes = {math.prod(s["shape"]) for e in recorder.of("node") for s in e["grad_inputs"] if s}
    dtypes = {s["dtype"] for e in recorder.of("node") for s in e["grad_inputs"] if s}
    assert max(sizes) == 14400 and {"float16", "bfloat16", "float64", "float32"} <= dtypes
    assert any(s and s["nonfinite"] for e in recorder.of("node") for s in e["grad_inputs"])


def close_summary(got: Any, want: Any) -> bool:
    """Two summaries from a trace, without their tensors: equal but for the mean, which may
    differ by the reduction-order tolerance (scaled by the largest magnitude, which bounds the
    mean magnitude the tolerance is relative to)."""
    if got == want:
        return True
    if not (isinstance(got, dict) and isinstance(want, dict)):
        return False
    if {k: v for k, v in got.items() if k != "mean"} != {
            k: v for k, v in want.items() if k != "mean"}:
        return False
    a, b = got.get("mean"), want.get("mean")
    if not (isinstance(a, float) and isinstance(b, float)):
        return False
    eps = torch.finfo(getattr(torch, want["dtype"])).eps
    return abs(a - b) <= 8 * eps * max(abs(want["min"]), abs(want["max"]))


def close_events(got: Any, want: Any) -> bool:
    """``close_summary`` through the lists and tuples of recorded events."""
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(map(close_events, got, want))
    return close_summary(got, want)


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "per-tensor"])
def test_recorded_traces_are_the_same_on_either_path(monkeypatch: pytest.MonkeyPatch,
                                                     grouped: bool) -> None:
    monkeypatch.setattr(summary_device, "GROUPED", grouped)
    same = close_events if grouped else (lambda got, want: got == want)

    def run() -> list[Any]:
        recorder = ListRecorder()
        with captured(Capture(recorder)):
            chain(300).backward()
        return [(e["step"], e["name"], e["grad_outputs"], e["grad_inputs"])
                for e in recorder.of("node")] + [e["after"] for e in recorder.of("accumulate")]

    host = run()
    monkeypatch.setattr(summary_device, "FORCE", True)
    assert same(run(), host)
    monkeypatch.setattr(summary_device, "HELD_BYTES", 16 << 10)
    assert same(run(), host)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_the_reduction_order_tolerance_is_tight() -> None:
    t = torch.randn(64, 48)
    (s,) = batch_summaries([t])
    assert s is not None and _same_up_to_reduction_order(s, s, t)
    assert not _same_up_to_reduction_order(dict(s, mean=s["mean"] + 1e-4), s, t)
    assert not _same_up_to_reduction_order(dict(s, min=0.0), s, t)


@cuda
def test_cuda_summaries_equal_cpu_ones() -> None:
    items = [t for t in tensors() if t.layout == torch.strided and t.is_floating_point()]
    got = batch_summaries([t.cuda() for t in items])
    want = [dict(s, device="cuda:0") for s in batch_summaries(items)]
    bad = [(t.dtype, list(t.shape), g, w) for t, g, w in zip(items, got, want, strict=True)
           if not _same_up_to_reduction_order(g, w, t)]
    assert not bad


@cuda
def test_cuda_recorded_pass_syncs_once_per_batch() -> None:
    torch.manual_seed(1)
    layers = [torch.randn(512, 512, device="cuda", requires_grad=True) for _ in range(40)]
    x = torch.randn(64, 512, device="cuda")
    for w in layers:
        x = (x @ w).tanh().half().float()
    loss = x.pow(2).mean()
    recorder = ListRecorder()
    with captured(Capture(recorder)), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    nodes = len(recorder.of("pass_begin")[0]["nodes"])
    assert len(syncs) <= math.ceil(nodes / 256) + 4


def test_tensors_that_retain_grad_are_read_in_one_batch(device_path: None) -> None:
    recorder = ListRecorder()
    with captured(Capture(recorder)):
        x = torch.randn(8, requires_grad=True)
        kept = [x * k for k in range(1, 13)]
        for t in kept:
            t.retain_grad()
        loss = sum(t.sin().sum() for t in kept)
        before = transfers.count()
        loss.backward()  # type: ignore[union-attr]
        reads = transfers.count() - before
    retained = [e for e in recorder.of("accumulate") if e["retained"]]
    assert len(retained) == 12 and all(e["after"]["nonfinite"] == 0 for e in retained)
    assert reads <= 4


@pytest.mark.parametrize("shape_of", [
    lambda v: v.view(90, 100).t(),                      # transposed: one dense block
    lambda v: v.view(10, 9, 100).permute(2, 0, 1),      # permuted
    lambda v: v.view(90, 100)[:, :50],                  # gaps: slabs of whole rows
    lambda v: v.view(9, 1000)[:, ::2],                  # a row past the limit: cut again
])
def test_non_finite_count_cuts_strided_tensors_in_few_pieces(
        shape_of: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    values = torch.randn(9000)
    values[::7] = math.nan
    values[3::13] = -math.inf
    t = shape_of(values)
    monkeypatch.setattr(summary_device, "COUNT_CHUNK", 1000)
    pieces: list[int] = []
    piece = summary_device._count_piece
    monkeypatch.setattr(summary_device, "_count_piece",
                        lambda p: (pieces.append(p.numel()), piece(p))[1])
    assert int(summary_device.count_nonfinite(t)) == int((~torch.isfinite(t)).sum())
    assert sum(pieces) == t.numel() and max(pieces) <= 1000
    assert len(pieces) <= -(-t.numel() // 1000) + 9, f"{len(pieces)} pieces"  # not row by row


def test_careful_path_reads_a_transposed_tensor_in_few_chunks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from backstep.engine.summary import careful
    from backstep.engine.summary import format as summary_format

    values = torch.randn(200, 300, generator=torch.Generator().manual_seed(0))
    values[3, 7] = math.inf
    monkeypatch.setattr(summary_format, "CHUNK", 1000)
    reads: list[object] = []
    read = careful.transfers.read
    monkeypatch.setattr(careful.transfers, "read", lambda v: (reads.append(v), read(v))[1])
    whole = careful.careful_summary(values.t().contiguous())
    strided = careful.careful_summary(values.t())
    assert strided == whole
    assert len(reads) <= 2 * 5 * 60 + 10, f"{len(reads)} reads: chunked row by row"
