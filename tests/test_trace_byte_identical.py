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


def _same_as_python(tmp_path: Path, body: str,
                    how: str) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    (tmp_path / "script.py").write_text(textwrap.dedent(body))
    plain = _run([sys.executable, "script.py"], tmp_path)
    under = _run([sys.executable, "-m", "backstep", *HOW[how], "script.py"], tmp_path)
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
