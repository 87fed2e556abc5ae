"""The ``floor`` mode of benchmarks/bench_tiny_passes.py: the least an in-process trace of a tiny
pass runs. Its number is only worth quoting if it runs every pass's hooks and reductions, leaves
the gradients alone and puts torch back as it was."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_tiny_passes as bench  # noqa: E402


@pytest.mark.parametrize("script", ["autograd", "function"])
def test_floor_leaves_the_gradients_and_torch_as_they_were(script: str) -> None:
    plain_params, plain_step = bench._steps(script)
    floor_params, floor_step = bench._steps(script)
    original = torch.autograd._engine_run_backward
    for _ in range(3):
        plain_step()
    with bench._Floor():
        assert torch.autograd._engine_run_backward is not original
        for _ in range(3):
            floor_step()
    assert torch.autograd._engine_run_backward is original
    for a, b in zip(plain_params, floor_params, strict=True):
        assert torch.equal(a, b)


def test_floor_hooks_every_node_and_reduces_each_distinct_gradient(monkeypatch) -> None:
    seen: list[list] = []
    real = bench._reduce

    def spy(records: list) -> list[float]:
        seen.append(list(records))
        return real(records)

    monkeypatch.setattr(bench, "_reduce", spy)
    _, step = bench._steps("function")
    with bench._Floor():
        step()
    assert len(seen) == 1
    # the Function tutorial's graph: 12 nodes, each hooked once
    assert sorted(i for i, _, _ in seen[0]) == list(range(12))


def test_reduce_gives_min_max_sum_and_norm_as_floats() -> None:
    big = torch.tensor([3.0, -4.0])
    scalar = torch.tensor(2.5)
    records = [(0, (big, None), (scalar,)), (1, (scalar,), (big,))]
    assert bench._reduce(records) == [2.5, -4.0, 3.0, -1.0, 5.0]
