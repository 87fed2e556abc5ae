"""A compiled region is a place you can read: each ``CompiledFunctionBackward`` node of a
recorded pass comes with a ``region`` event naming the compiled function, its backward ops in
order with the module and forward line each differentiates, and what its gradients feed. A
region that cannot be read says why in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from backstep.engine.compiled import region
from backstep.engine.compiled.artifacts import CompileLog, parse_sources
from backstep.events.spec import check

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}

SCRIPT = textwrap.dedent("""\
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            return x + self.b(h) * 0.5


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x).pow(2).mean()


    torch.manual_seed(0)
    net = Net()
    compiled = torch.compile(net, backend="aot_eager")
    for _ in range(2):
        compiled(torch.randn(4, 8)).backward()
    print(net.head.bias.grad.item())
""")


def _trace(tmp_path: Path) -> list[dict]:
    (tmp_path / "net.py").write_text(SCRIPT)
    plain = subprocess.run([sys.executable, "net.py"], cwd=tmp_path, capture_output=True,
                           text=True, env=ENV, timeout=300)
    result = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", "run.jsonl",
                             "net.py"], cwd=tmp_path, capture_output=True, text=True, env=ENV,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain.stdout and result.stderr == plain.stderr
    return [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]


def test_a_compiled_region_lists_its_backward_ops_with_their_forward_lines(
        tmp_path: Path) -> None:
    events = _trace(tmp_path)
    regions = [e for e in events if e["event"] == "region"]
    assert [r["pass"] for r in regions] == [1, 2]  # every recorded pass, next to its nodes
    first = regions[0]
    assert check(first) is None
    begin = next(e for e in events if e["event"] == "pass_begin")
    node = next(n for n in begin["nodes"] if n["id"] == first["id"])
    assert node["name"] == "CompiledFunctionBackward"
    assert first["reason"] is None
    assert first["function"]["name"] == "forward"
    assert first["function"]["file"].endswith("net.py") and first["function"]["line"] == 24
    ops = first["ops"]
    assert ops[0]["op"].startswith("aten.")
    by_module = {op["module"] for op in ops}
    assert {"head", "blocks.0.a", "blocks.1.b"} <= by_module
    lines = {(op["module"], op["source"]["line"], op["source"]["code"]) for op in ops
             if op["source"] is not None}
    assert ("blocks.1.b", 13, "return x + self.b(h) * 0.5") in lines
    assert ("blocks.0.a", 12, "h = torch.tanh(self.a(x))") in lines
    assert all(op["source"]["file"].endswith("net.py") for op in ops if op["source"])
    # the backward runs from the loss towards the inputs: the head's ops come before block 0's
    modules = [op["module"] for op in ops]
    assert modules.index("head") < modules.index("blocks.0.a")
    assert first["inputs"][:3] == ["net.blocks.0.a.weight", "net.blocks.0.a.bias", None]
    assert first["outputs"] == ["output 0"]


TWO_OUTPUTS = textwrap.dedent("""\
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            h = torch.tanh(self.fc(x))
            return h, (h * h).mean()


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.compile(Body(), backend="aot_eager")
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            h, reg = self.body(x)
            return self.head(h), reg


    torch.manual_seed(0)
    model = Model()
    logits, reg = model(torch.randn(4, 8))
    (F.cross_entropy(logits, torch.tensor([0, 1, 2, 0])) + reg).backward()
    print(model.head.bias.grad.sum().item())
""")


def test_a_regions_incoming_gradients_are_named_by_what_consumed_each_output(
        tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(TWO_OUTPUTS)
    result = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", "run.jsonl",
                             "net.py"], cwd=tmp_path, capture_output=True, text=True, env=ENV,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    found = next(e for e in events if e["event"] == "region")
    assert check(found) is None
    nodes = {n["id"]: n for n in next(e for e in events if e["event"] == "pass_begin")["nodes"]}
    by_name = {n["name"]: n["id"] for n in nodes.values()}
    # output 0 (h) went into the head's Linear, output 1 (the penalty) into the loss's sum
    assert found["outputs"] == [
        f"output 0 → AddmmBackward0 #{by_name['AddmmBackward0']} in model.head (net.py:24)",
        f"output 1 → AddBackward0 #{by_name['AddBackward0']} (net.py:30)"]


class Opaque(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_a_region_that_cannot_be_read_says_why_in_one_line() -> None:
    x = torch.ones(2, requires_grad=True)
    node = Opaque.apply(x).grad_fn
    found = region.describe(node, CompileLog())
    assert found["ops"] == [] and "\n" not in found["reason"]
    assert "not an AOTAutograd region" in found["reason"]

    class Broken:  # an AOTAutograd-like class whose backward graph raises when read
        _aot_id = 7

        class _lazy_backward_info:  # noqa: N801
            @staticmethod
            def bw_module_fn():
                raise RuntimeError("boom")

    class Node:
        _forward_cls = Broken

    found = region.describe(Node(), None)
    assert found["aot_id"] == 7 and found["reason"] == "backward graph not readable (RuntimeError)"

    class Empty:
        _aot_id = 8
        _lazy_backward_info = None

    class Node2:
        _forward_cls = Empty

    assert region.describe(Node2(), None)["reason"] == "torch kept no backward graph for this region"


def test_module_paths_and_printed_graph_lines() -> None:
    assert region.module_path({"1": ("L['self'].blocks.1.attn", object)}) == "blocks.1.attn"
    assert region.module_path(
        {"1": ("L['self']._modules['h']._modules['0']", object)}) == "h.0"
    assert region.module_path(None) is None
    printed = textwrap.dedent("""\
        class GraphModule(torch.nn.Module):
            def forward(self, L_x_: "f32[4]"):
                # File: /a/b.py:12 in forward, code: h = torch.tanh(x)
                h: "f32[4]" = torch.tanh(l_x_)
                # No stacktrace found for following nodes
                mul: "f32[4]" = h * 2
    """)
    assert parse_sources(printed) == {"h": {"file": "/a/b.py", "line": 12,
                                            "code": "h = torch.tanh(x)", "function": "forward"}}
