"""Under ``backstep trace`` (provenance on) and ``backstep run --listen`` (no UI attached) a
script prints exactly what ``python script.py`` prints, byte for byte, stderr included: warnings
at every stacklevel, RecursionError tracebacks, and a script that closes its own stdout. Nothing
is normalised but backstep's own "a UI may attach" line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from backstep.events.form import expand

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}

WARNINGS = """\
    import warnings

    import torch
    import torch.nn.functional as F
    from torch import nn


    def helper(level):
        warnings.warn(f"helper at stacklevel {level}", stacklevel=level)


    class Block(nn.Module):
        def forward(self, x):
            for level in (1, 2, 3, 4):
                warnings.warn(f"forward at stacklevel {level}", stacklevel=level)
                helper(level)
            return x * 2


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.soft = nn.LogSoftmax()  # torch's own module: warns at stacklevel 5

        def forward(self, x):
            y = self.soft(self.block(x))
            y = F.softmax(y)  # torch.nn.functional, through the torch-function mode
            for level in (3, 4, 5):
                y = F.log_softmax(y, _stacklevel=level)
            return F.upsample(y[None], scale_factor=2)  # a deprecation


    def train(net, x):
        net(x).sum().backward()


    torch.manual_seed(0)
    x = torch.randn(2, 3, requires_grad=True)
    net = Net()
    net(x).sum().backward()
    train(net, x)
    nn.LogSoftmax()(x).sum().backward()
    warnings.warn("past the end of the stack", stacklevel=3)
    print(x.grad.sum().item())
"""

WARNINGS_IN_BACKWARD = """\
    import warnings

    import torch
    import torch.nn as nn


    def tensor_hook(level):
        def hook(grad):
            warnings.warn(f"tensor hook level {level}", stacklevel=level)
        return hook


    class Fn(torch.autograd.Function):
        level = 1

        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            warnings.warn(f"function level {Fn.level}", stacklevel=Fn.level)
            return g * 2


    def forward(level, x, lin):
        y = x * 3
        y.register_hook(tensor_hook(level))
        Fn.level = level
        return lin(Fn.apply(y)).sum()


    def step(level):
        x = torch.randn(3, requires_grad=True)
        lin = nn.Linear(3, 3)
        lin.register_full_backward_hook(
            lambda m, gi, go: warnings.warn(f"module hook level {level}", stacklevel=level))
        lin.register_full_backward_pre_hook(
            lambda m, go: warnings.warn(f"module pre hook level {level}", stacklevel=level))
        forward(level, x, lin).backward()
        torch.autograd.grad(forward(level, x, lin), x)


    for level in range(1, 7):
        step(level)
        step(level)

    # torch's own check: a full backward hook on a module whose inputs need no grad
    net = nn.Linear(3, 1)
    net.register_full_backward_hook(lambda m, gi, go: None)
    for _ in range(2):
        net(torch.randn(2, 3)).sum().backward()
    net(torch.randn(2, 3)).sum().backward()
    print("done")
"""

RECURSION_THROUGH_FORWARD = """\
    import torch
    from torch import nn


    class Again(nn.Module):
        def forward(self, x):
            return self(x)


    Again()(torch.randn(1))
"""

RECURSION_PLAIN = """\
    import torch


    def down(n):
        return down(n + 1)


    down(0)
"""

RECURSION_WITH_LIMIT = """\
    import sys

    import torch
    from torch import nn

    print(sys.getrecursionlimit())
    sys.setrecursionlimit(300)
    print(sys.getrecursionlimit())
    try:
        sys.setrecursionlimit(1)
    except RecursionError as error:
        print(error)


    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x, n):
            return self(self.lin(x), n + 1)


    Deep()(torch.randn(1, 2), 0)
"""

CLOSES_STDOUT = """\
    import sys
    import torch

    with sys.stdout as out:
        print("inside", file=out)
        print(repr(out.encoding), out.errors, out.line_buffering, out.isatty(), out.fileno(),
              out.closed, file=sys.stderr)
    print(sys.stdout.closed, file=sys.stderr)
    print("after")
"""

CLOSES_STDERR = """\
    import sys
    import torch

    print("before", file=sys.stderr)
    with sys.stderr:
        print("inside", file=sys.stderr)
    print("out")
"""


MODULE_COMPILE = """\
    import torch
    from torch import nn


    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 1)

        def forward(self, x):
            return self.lin(x).relu()


    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), Head())
    model.compile(backend="eager")  # compiles each module's _call_impl, not the model
    x = torch.randn(4, 8)
    for _ in range(2):
        model(x).pow(2).mean().backward()
    print(model[0].weight.grad.sum().item())
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL,
                          env=ENV, timeout=180)


HOW = {
    "trace": ["trace", "-o", "run.jsonl"],
    "run-listen": ["run", "--listen", "127.0.0.1:0", "--no-wait"],
}


@pytest.fixture(params=list(HOW))
def how(request: pytest.FixtureRequest) -> str:
    return request.param


def _same_as_python(tmp_path: Path, body: str, how: str, *options: str
                    ) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    (tmp_path / "script.py").write_text(textwrap.dedent(body))
    plain = _run([sys.executable, "script.py"], tmp_path)
    under = _run([sys.executable, "-m", "backstep", *HOW[how], *options, "script.py"], tmp_path)
    err = under.stderr
    if how == "run-listen":
        first, _, err = err.partition(b"\n")
        assert first.startswith(b"backstep: the script runs; a UI may attach on 127.0.0.1:")
    assert err.decode() == plain.stderr.decode()
    assert under.stdout == plain.stdout
    assert under.returncode == plain.returncode
    return plain, tmp_path / "run.jsonl"


def test_warnings_at_every_stacklevel_name_pythons_lines(tmp_path: Path, how: str) -> None:
    plain, trace = _same_as_python(tmp_path, WARNINGS, how)
    err = plain.stderr.decode()
    assert err.count("UserWarning: forward at stacklevel") == 4
    assert "module.py:1778: UserWarning: Implicit dimension choice for log_softmax" in err
    assert "sys:1: UserWarning: past the end of the stack" in err
    if how != "trace":
        return
    # what the replay console shows is what the trace recorded: the same text
    events = [expand(json.loads(line)) for line in trace.read_text().splitlines()]
    recorded = "".join(e["text"] for e in events
                       if e["event"] == "output" and e["stream"] == "stderr")
    assert recorded == err


@pytest.mark.parametrize("source", [True, False], ids=["source", "no-source"])
def test_warnings_raised_inside_backward_name_pythons_lines(tmp_path: Path, how: str,
                                                            source: bool) -> None:
    """Tensor hooks, module (pre-)hooks, a custom Function's backward and torch's own check
    warn at stacklevels 1-6 through ``backward()`` and ``autograd.grad``, each twice (the
    once-per-location filter shows the second only where python does): capture's frames
    between the API and the engine are not counted, with or without provenance."""
    plain, _ = _same_as_python(tmp_path, WARNINGS_IN_BACKWARD, how,
                               *(() if source else ("--no-source",)))
    err = plain.stderr.decode()
    for line in (52, 53):  # torch's own warning, at stacklevel 5: the user's two backward lines
        assert err.count(f"script.py:{line}: UserWarning: Full backward hook is firing") == 1
    assert "script.py:41: UserWarning: module hook level 5" in err
    assert "script.py:46: UserWarning: function level 6" in err


@pytest.mark.parametrize("body", [RECURSION_THROUGH_FORWARD, RECURSION_PLAIN,
                                  RECURSION_WITH_LIMIT],
                         ids=["through-forward", "plain-function", "script-sets-limit"])
def test_recursion_errors_stop_at_pythons_depth(tmp_path: Path, body: str, how: str) -> None:
    plain, _ = _same_as_python(tmp_path, body, how)
    assert b"RecursionError: maximum recursion depth exceeded" in plain.stderr
    assert b"more times]" in plain.stderr or b"_call_impl" in plain.stderr


@pytest.mark.parametrize("body", [CLOSES_STDOUT, CLOSES_STDERR], ids=["stdout", "stderr"])
def test_a_script_may_close_its_own_stream(tmp_path: Path, body: str, how: str) -> None:
    plain, _ = _same_as_python(tmp_path, body, how)
    assert b"inside" in plain.stdout + plain.stderr


def test_module_compile_traces_what_it_traces_without_backstep(tmp_path: Path) -> None:
    """Dynamo runs torch's _call_impl untraced and compiles the Python frames it calls: the
    hooks woven into it must not be among them (no Dynamo warnings, no extra graphs)."""
    _same_as_python(tmp_path, MODULE_COMPILE, "trace")
