"""torch.compile under backstep computes what it computes without it: a small GPT trained for
three steps under ``trace`` and ``attach(trace=...)`` prints the same losses, the same gradient
bytes and the same Dynamo counters (no extra graph breaks, graphs, frames or recompiles) as
``python``, with the inductor backend (C++ on CPU) and with aot_eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backstep.engine.pending_tags import metadata as node_metadata
from tests.compiled_scripts import GPT

# one OpenMP thread: with two, even two plain runs of inductor's kernels differ in the last bits
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}, "OMP_NUM_THREADS": "1"}


def _run(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL, env={**ENV, **extra})


HOW = {
    "trace": lambda: ([sys.executable, "-m", "backstep", "trace", "-o", "run.jsonl"], {}),
    "attach": lambda: ([sys.executable], {"USE_ATTACH": "run.jsonl"}),
}


@pytest.mark.parametrize("how", list(HOW))
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_gpt_is_bit_identical(tmp_path: Path, backend: str, how: str) -> None:
    (tmp_path / "gpt.py").write_text(GPT)
    plain = _run([sys.executable, "gpt.py", backend], tmp_path)
    assert plain.returncode == 0, plain.stderr
    prefix, extra = HOW[how]()
    under = _run([*prefix, "gpt.py", backend], tmp_path, **extra)
    assert under.stdout == plain.stdout  # losses, gradient bytes, Dynamo's counters
    assert under.stderr == plain.stderr
    assert under.returncode == 0
    assert "graph_breaks 0\nunique_graphs 1\n" in plain.stdout
    events = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    begins = [e for e in events if e["event"] == "pass_begin"]
    assert len(begins) == 3, "one pass per training step, none for the compiler's own tracing"
    assert any(n["name"] == "CompiledFunctionBackward" for n in begins[0]["nodes"])


class _ManySaved(torch.autograd.Function):
    """Saves 24 tensors, as a compiled region's CompiledFunction saves its activations."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(*([x] * 24))
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_tagging_a_functions_node_does_not_call_the_mode_per_saved_tensor() -> None:
    """Function.apply (a compiled region's forward goes through it) tags its node outside the
    mode's own __torch_function__: reading each saved tensor's version there went through the
    mode once per tensor (59 calls per forward of a small compiled GPT, now 4)."""
    from backstep.engine.provenance import Provenance, tagging

    code = tagging.TaggingMode.__torch_function__.__code__
    calls = []

    def profile(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's signature
        if event == "call" and frame.f_code is code:
            calls.append(frame.f_back.f_code.co_filename)

    x = torch.ones(3, requires_grad=True)
    provenance = Provenance()
    provenance.install()
    try:
        sys.setprofile(profile)
        y = _ManySaved.apply(x)
        sys.setprofile(None)
    finally:
        sys.setprofile(None)
        provenance.uninstall()
    assert not [c for c in calls if c == tagging.__file__], "our own reads went through the mode"
    assert len(calls) <= 2, calls
    assert node_metadata(y.grad_fn).get("backstep.source") is not None  # still tagged


MODE_AT_COMPILE = """\
import torch
import torch._dynamo
from torch import nn

seen = []
torch._dynamo.callback_handler.register_start_callback(lambda *a: seen.append(
    [type(torch._C._get_function_stack_at(i)).__name__
     for i in range(torch._C._len_torch_function_stack())]))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).tanh()


compiled = torch.compile(Net(), backend="aot_eager")
for _ in range(2):
    compiled(torch.randn(2, 4)).sum().backward()
print(seen)
"""


def test_dynamo_compiles_a_user_module_without_backsteps_mode(tmp_path: Path) -> None:
    """The torch-function mode stays paused in the forward Dynamo compiles (as it is absent
    without backstep): Dynamo neither traces it into the graph nor guards on it, and the
    compiled code never calls it."""
    (tmp_path / "net.py").write_text(MODE_AT_COMPILE)
    plain = _run([sys.executable, "net.py"], tmp_path)
    under = _run([sys.executable, "-m", "backstep", "trace", "-o", "run.jsonl", "net.py"],
                 tmp_path)
    assert plain.returncode == 0 and "TaggingMode" not in under.stdout, under.stdout + under.stderr
    assert under.stdout == plain.stdout, under.stderr
