"""Real traces for the replay, diff and export tests: recorded by ``backstep trace`` itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ENV = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}

# One script that makes every kind of pass: retained graph (two passes over one graph), a nested
# pass (reentrant checkpoint), and two threads running backward at once.
EVERYTHING = """\
import threading
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
lin = torch.nn.Linear(3, 3)
x = torch.randn(4, 3)
y = torch.tanh(lin(x)).sum()
y.backward(retain_graph=True)
y.backward()

x2 = x.clone().requires_grad_()
z = checkpoint(lambda t: torch.sin(lin(t)), x2, use_reentrant=True).sum()
z.backward()

def work(seed):
    w = torch.randn(5, 5, requires_grad=True, generator=torch.Generator().manual_seed(seed))
    for _ in range(3):
        (w.exp() * 2).sum().backward()

threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done")
"""


def record(directory: Path, name: str, body: str, *options: str,
           env: dict[str, str] | None = None) -> Path:
    """Write ``body`` to ``name``.py in ``directory``, trace it, return the trace's path."""
    script = directory / f"{name}.py"
    script.write_text(textwrap.dedent(body))
    out = directory / f"{name}.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "backstep", "trace", *options, "-o", str(out), str(script)],
        cwd=directory, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=180,
    )
    assert out.exists(), done.stderr
    return out


# A small model with a custom Function; environment variables make the variants diff compares.
VARIANTS = """\
import os
import torch

class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if os.environ.get("BUGGY"):
            return grad * x
        return 2 * grad * x

dtype = getattr(torch, os.environ.get("DTYPE", "float32"))
torch.manual_seed(0)
lin = torch.nn.Linear(3, 2).to(dtype)
x = torch.randn(4, 3).to(dtype)
act = torch.sigmoid if os.environ.get("OP") == "sigmoid" else torch.tanh
for _ in range(int(os.environ.get("ITERS", "1"))):
    h = Square.apply(act(lin(x))) * float(os.environ.get("SCALE", "2"))
    y = h.sum()
    y.backward()
print("done")
"""


def record_all(directory: Path, runs: dict[str, tuple[str, tuple[str, ...], dict[str, str]]]
               ) -> dict[str, Path]:
    """Trace several (body, options, env) at once (each run is mostly torch's import)."""
    started = {}
    for name, (body, options, env) in runs.items():
        script = directory / f"{name}.py"
        script.write_text(textwrap.dedent(body))
        out = directory / f"{name}.jsonl"
        started[name] = (out, subprocess.Popen(
            [sys.executable, "-m", "backstep", "trace", *options, "-o", str(out), str(script)],
            cwd=directory, env={**ENV, **env}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True))
    paths = {}
    for name, (out, process) in started.items():
        _, err = process.communicate(timeout=300)
        assert out.exists(), err
        paths[name] = out
    return paths
