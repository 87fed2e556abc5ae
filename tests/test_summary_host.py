"""Host summaries of small batches: one-element tensors skip the reduction kernels, few blocks
are rounded in Python; both give exactly what the kernels give."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from backstep.engine.rounding import round_digits, stat_value
from backstep.engine.summary import SummaryBatch
from backstep.engine.summary import host as summary_host

SPECIALS = [0.0, -0.0, 1e-45, 1e-40, 1e-30, 1.17e-38, 2.5, -7.25, 1 / 3, 1e20, 3e38, -3.4e38,
            65504.0, 6e-8, math.inf, -math.inf, math.nan]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_one_element_tensors_are_summarised_without_reduction_kernels() -> None:
    batch = SummaryBatch()
    tensors = [torch.tensor(v) for v in (0.5, -2.0, 3.25)] + [torch.randn(1, 1) for _ in range(5)]
    for t in tensors:
        batch.add(t)
    with _Ops() as ops:
        summaries = batch.compute()
    assert not {"aminmax", "sum", "linalg_vector_norm", "_foreach_norm", "norm"} & set(ops.seen)
    assert [s["min"] for s in summaries[:3]] == [0.5, -2.0, 3.25]
    assert [s["norm"] for s in summaries[:3]] == [0.5, 2.0, 3.25]
    assert summaries[1]["values"] == [-2.0] and summaries[4]["shape"] == [1, 1]


def test_one_element_tensors_cost_no_kernel_at_all() -> None:
    """Many tiny passes (a loss, scalar parameters) are mostly one-element gradients: they are
    read one by one, not stacked, viewed and copied into one tensor first (issue 28)."""
    batch = SummaryBatch()
    for v in (0.5, -2.0, 3.25, -0.0):
        batch.add(torch.tensor(v))
    batch.add(torch.tensor([[1.5]]))
    with _Ops() as ops:
        summaries = batch.compute()
    assert set(ops.seen) <= {"_local_scalar_dense", "lift_fresh"}, ops.seen
    assert [s["values"] for s in summaries] == [[0.5], [-2.0], [3.25], [-0.0], [1.5]]
    assert [s["norm"] for s in summaries] == [0.5, 2.0, 3.25, 0.0, 1.5]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_one_element_shortcut_equals_the_kernels(dtype: torch.dtype) -> None:
    """min, max, norm and sum of one element, as aminmax, _foreach_norm and sum give them, in
    one batch with larger tensors (the columns land where each tensor's owner says)."""
    group = summary_host.HostGroup()
    tensors = []
    for k, v in enumerate(SPECIALS):
        tensors.append(torch.tensor(v).to(dtype).reshape((1,) * (k % 3)))
        tensors.append(torch.randn(3 + k).to(dtype))
    for slot, t in enumerate(tensors):
        group.add(t, slot, t.numel(), 16)
    raw, owner = group._reduce()
    expected = summary_host._reduce(tensors)
    got = raw[:, owner]
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_blocks_read_as_lists_equal_the_kernels(dtype: torch.dtype) -> None:
    """``_read``: a batch of few blocks (tiny passes) reads its one-element values straight
    into the four rows, no tensor made of them; each column is still what the kernels give."""
    group = summary_host.HostGroup()
    tensors = []
    for k, v in enumerate(SPECIALS[:6] + SPECIALS[-3:]):
        tensors.append(torch.tensor(v).to(dtype).reshape((1,) * (k % 3)))
        if k % 2:
            tensors.append(torch.randn(3 + k).to(dtype))
    for slot, t in enumerate(tensors):
        group.add(t, slot, t.numel(), 16)
    stats, owner = group._read()
    assert type(stats) is list and len(owner) == len(tensors)
    expected = summary_host._reduce(tensors).tolist()
    for row, want in zip(stats, expected, strict=True):
        got = [row[j] for j in owner]
        assert [math.isnan(g) for g in got] == [math.isnan(w) for w in want]
        assert [g for g in got if g == g] == [w for w in want if w == w]  # as _reduce's test


@pytest.mark.parametrize(("digits", "dtype"), [(8, torch.float32), (5, torch.float16)])
def test_rounding_in_python_equals_the_kernels(digits: int, dtype: torch.dtype) -> None:
    """What ``_blocks`` shows either way: ``round_digits``, with ``stat_value`` where it gave NaN
    (a power of ten it cannot make exactly), NaN where the value is not finite."""
    torch.manual_seed(0)
    values = torch.cat([torch.tensor(SPECIALS, dtype=torch.float64),
                        torch.randn(200, dtype=torch.float64) * 10.0 ** torch.randint(-40, 40, (200,)),
                        torch.tensor([1e-300, 5e-324, 1.7e308, 123456789.5, 0.1 + 0.2])])
    raw = values.reshape(1, -1).expand(4, -1)
    rounded = round_digits(raw, digits).tolist()[:3]
    expected = [[x if x == x else (stat_value(v, dtype) if math.isfinite(v) else math.nan)
                 for x, v in zip(row, values.tolist(), strict=True)] for row in rounded]
    got = summary_host._rounded(raw.tolist(), digits)
    for row_got, row_expected in zip(got, expected, strict=True):
        assert [repr(x) for x in row_got] == [repr(x) for x in row_expected]


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_element_summaries_written_directly_equal_the_general_path(dtype: torch.dtype) -> None:
    """``scalars.write_scalars`` (issue 28: tiny passes are mostly one-element gradients) gives
    every summary dict and text that ``_read`` and ``_write`` give, beside larger tensors; the
    values it cannot write (not finite) are left to them."""
    torch.manual_seed(0)
    tensors = []
    for k, v in enumerate(SPECIALS + [1.7e308, -1.7e308, 4.082918e-06, -3.5762787e-06, 1803.5581]):
        tensors.append(torch.tensor(v, dtype=torch.float64).to(dtype).reshape((1,) * (k % 3)))
        if k % 4 == 0:
            tensors.append(torch.randn(5 + k).to(dtype))
    tensors += [torch.randn(()).to(dtype) * 10.0 ** k for k in range(-30, 30, 3)]

    def group_of() -> summary_host.HostGroup:
        group = summary_host.HostGroup()
        for slot, t in enumerate(tensors):
            group.add(t, slot, t.numel(), 16)
        return group

    general: list[Any] = [None] * len(tensors)
    group = group_of()
    stats, owner = group._read()
    summary_host._write(dtype, group.tensors, group.numels, group.slots, owner, stats, None,
                        general)
    direct: list[Any] = [None] * len(tensors)
    group = group_of()
    assert group._write_singles(dtype, direct) is False  # larger tensors are left
    written = [i for i, s in enumerate(direct) if s is not None]
    assert len(written) > len(tensors) // 2
    group.compute(dtype, direct)
    for got, want in zip(direct, general, strict=True):
        assert repr(dict(got)) == repr(dict(want))  # repr: -0.0, NaN and key order alike
        assert getattr(got, "text", None) == getattr(want, "text", None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_larger_blocks_read_as_lists_equal_the_kernels(dtype: torch.dtype) -> None:
    """``_read`` of a batch with no one-element tensor (what is left once ``write_scalars`` has
    written them) reads the reductions as lists, each exactly as ``_reduce``'s float64 rows."""
    torch.manual_seed(1)
    tensors = [(torch.randn(3 + k) * 10.0 ** (k - 4)).to(dtype) for k in range(9)]
    tensors[2][1] = math.inf
    tensors[5][0] = math.nan
    group = summary_host.HostGroup()
    for slot, t in enumerate(tensors):
        group.add(t, slot, t.numel(), 16)
    stats, owner = group._read()
    assert type(stats) is list
    expected = summary_host._reduce(tensors).tolist()
    for row, want in zip(stats, expected, strict=True):
        got = [row[j] for j in owner]
        assert [repr(g) for g in got] == [repr(w) for w in want]


@pytest.mark.parametrize("dtype", DTYPES)
def test_written_scalars_leave_the_rest_as_if_added_alone(dtype: torch.dtype) -> None:
    """Once ``write_scalars`` wrote the one-element tensors, the group keeps the others as if
    only they had been added (issue 28: without adding them again): views of one block share
    its reduction, a scalar it could not write (not finite) stays, and every summary is the
    one the group of the others alone gives."""
    torch.manual_seed(2)
    m = torch.randn(4, 5).to(dtype)
    ones = torch.ones(()).to(dtype).expand(7)  # a sum's gradient: one value, stride 0
    tensors = [torch.tensor(0.5).to(dtype), m, torch.tensor(math.nan).to(dtype), m.t(),
               torch.tensor(-0.0).to(dtype), ones, m.reshape(20), torch.randn(30).to(dtype),
               torch.tensor(-math.inf).to(dtype).reshape(1, 1), m[1], torch.tensor(3.0)
               .to(dtype)]
    group = summary_host.HostGroup()
    for slot, t in enumerate(tensors):
        group.add(t, slot, t.numel(), 16)
    direct: list[Any] = [None] * len(tensors)
    assert group._write_singles(dtype, direct) is False
    left = [slot for slot, s in enumerate(direct) if s is None]
    assert left == [1, 2, 3, 5, 6, 7, 8, 9]
    alone = summary_host.HostGroup()
    for slot in left:
        alone.add(tensors[slot], slot, tensors[slot].numel(), 16)
    for name in ("slots", "numels", "owner", "singles"):
        assert getattr(group, name) == getattr(alone, name), name
    assert [r is a for r, a in zip(group.reps, alone.reps, strict=True)] == [True] * 6
    assert group.unique == alone.unique
    group.compute(dtype, direct)
    want: list[Any] = [None] * len(tensors)
    alone.compute(dtype, want)
    for slot in left:
        assert repr(dict(direct[slot])) == repr(dict(want[slot]))
        assert getattr(direct[slot], "text", None) == getattr(want[slot], "text", None)


def _round_float32_as_it_was(x: float) -> float | str:
    """``rounding.round_for_dtype`` for float32 before issue 28's faster form, kept as the reference."""
    import struct

    from backstep.protocol import clean_number

    f32 = struct.Struct("f")
    if not math.isfinite(x):
        return clean_number(x)
    if f32.unpack(f32.pack(x))[0] == x:
        for digits in (6, 7, 8):
            short = float(f"{x:.{digits}g}")
            if f32.unpack(f32.pack(short))[0] == x:
                return short
    return float(f"{x:.9g}")


def test_float32_values_round_exactly_as_before() -> None:
    """Every float32 value of a summary (``values``) goes through ``round_single``: the same
    number as the formula it replaced, bit for bit, for random bit patterns (every exponent),
    powers of two, subnormals, the extremes, zeros of both signs and float64 values that are
    no float32."""
    from backstep.engine.rounding import round_for_dtype, round_single

    gen = torch.Generator().manual_seed(3)
    bits = torch.randint(-(2**31), 2**31, (60_000,), generator=gen, dtype=torch.int64)
    values = bits.to(torch.int32).view(torch.float32).tolist()
    values += [2.0**k for k in range(-149, 128)] + [-(2.0**k) for k in range(-149, 128, 7)]
    values += [3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38, 1e-45,
               0.0, -0.0, 0.1, 1 / 3, 4.7683716e-07, 6819.1396, 1.0000001, 0.99999994]
    values += torch.randn(5_000, dtype=torch.float64, generator=gen).tolist()
    values += [math.inf, -math.inf, math.nan]
    for x in values:
        want = _round_float32_as_it_was(x)
        got = round_for_dtype(x, torch.float32)
        assert repr(got) == repr(want), x
        assert repr(round_for_dtype(x, torch.complex64)) == repr(want), x
        if math.isfinite(x):
            assert repr(round_single(x)) == repr(want), x
            assert repr(round_single(x, float(format(x, ".8g")))) == repr(want), x
