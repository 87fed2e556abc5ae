"""``backstep diff eager.jsonl compiled.jsonl``: a torch.compile run is aligned with an eager
one by leaf and by region boundary (not by graph position, which differs by construction); the
first region whose gradients differ is named with the leaves it feeds and both sides' numbers,
and the exit code says it (0 same, 1 different) for CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "BACKSTEP_EAGER",
                                                        "TORCH_COMPILE_DISABLE",
                                                        "TORCHDYNAMO_DISABLE")}

SCRIPT = textwrap.dedent("""\
    import os
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            if os.environ.get("BUG") and torch.compiler.is_compiling():
                half = h * 0.5  # the same value forward, 1.5 times the gradient backward:
                h = h + (half - half.detach())  # only the compiled code does this
            return h


    torch.manual_seed(0)
    first = torch.compile(Block(), backend="aot_eager")
    second = torch.compile(nn.Linear(4, 1), backend="aot_eager")
    x = torch.randn(3, 4)
    for _ in range(2):
        second(first(x)).pow(2).mean().backward()
""")


def _record(tmp_path: Path, name: str, *options: str, **extra: str) -> Path:
    out = tmp_path / name
    result = subprocess.run([sys.executable, "-m", "backstep", "trace", *options, "-o", str(out),
                             "train.py"], cwd=tmp_path, capture_output=True, text=True,
                            env={**ENV, **extra}, timeout=300)
    assert result.returncode == 0, result.stderr
    return out


def _diff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backstep", "diff", *args],
                          capture_output=True, text=True, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp_path = tmp_path_factory.mktemp("compiled_diff")
    (tmp_path / "train.py").write_text(SCRIPT)
    return (_record(tmp_path, "eager.jsonl", "--eager"),
            _record(tmp_path, "compiled.jsonl"),
            _record(tmp_path, "buggy.jsonl", BUG="1"))


def test_a_faithful_compiled_run_agrees_with_eager(runs: tuple[Path, Path, Path]) -> None:
    eager, compiled, _ = runs
    result = _diff(str(eager), str(compiled))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled: B, eager: A" in result.stdout
    assert "no difference (2 pass(es), 4 region(s) compared)" in result.stdout


def test_the_first_differing_region_and_the_leaves_it_feeds(
        runs: tuple[Path, Path, Path]) -> None:
    eager, _, buggy = runs
    result = _diff(str(buggy), str(eager))  # either order
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "compiled: A, eager: B" in out
    assert "pass 1 (compiled) against pass 1 (eager):" in out
    # the loss's region (the Linear) runs first and agrees: the Block's region is named
    assert "first region that differs: CompiledFunctionBackward" in out
    assert "(compiled forward at" in out and "train.py:12)" in out
    assert "it feeds 2 leaves: first.a.weight, first.a.bias" in out
    # its incoming gradient, named by what took its forward output: the Linear's region
    assert "  its incoming gradients (one per forward output):\n    output 0 → " \
        "CompiledFunctionBackward #" in out and " in second (train.py:24)\n" in out
    assert "output 0 -> first.a.weight: norm" in out
    assert "    eager:    norm " in out and "    compiled: norm " in out
    assert "2 leaf .grad(s) differ:" in out and "second." not in out.split("leaf .grad")[1]
    report = json.loads(_diff("--json", str(buggy), str(eager)).stdout)
    assert report["mode"] == "compiled" and report["same"] is False
    assert [d["leaf"] for d in report["region"]["differs"]] == ["first.a.weight", "first.a.bias"]
    assert {d["leaf"] for d in report["leaves"]} == {"first.a.weight", "first.a.bias"}
