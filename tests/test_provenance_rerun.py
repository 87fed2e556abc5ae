"""A forward re-run inside a backward (reentrant checkpoint's recompute) is tagged like any
forward: the nested pass's nodes carry their lines and module paths, gradients stay exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import captured

HERE = Path(__file__)


def line_of(marker: str) -> int:
    for number, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# @{marker}"):
            return number
    raise AssertionError(marker)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x))  # @block-fc
        return h * 2 + x  # @block-out


def traced(run: Any) -> list[dict[str, Any]]:
    """The pass_begin events of ``run()`` under capture and provenance, as ``trace`` wires them."""
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.annotate = annotate
    stack = torch._C._len_torch_function_stack()
    with Provenance(), captured(capture):
        run()
    assert torch._C._len_torch_function_stack() == stack, "the mode stack is left as found"
    return recorder.of("pass_begin")


def spots(begin: dict[str, Any]) -> set[tuple[int | None, str | None]]:
    return {((n["source"] or {}).get("line"), n["module"])
            for n in begin["nodes"] if n["name"] != "AccumulateGrad"}


def test_reentrant_recompute_nodes_have_lines_and_modules() -> None:
    torch.manual_seed(0)
    block, head = Block(), nn.Linear(4, 1)
    x = torch.randn(2, 4, requires_grad=True)

    def run() -> None:
        head(checkpoint(block, x, use_reentrant=True)).sum().backward()

    outer, nested = traced(run)
    assert nested["parent"] == outer["pass"]
    assert spots(nested) == {
        (line_of("block-fc"), "block"),  # tanh
        (line_of("block-fc"), "block.fc"),  # addmm, t
        (line_of("block-out"), "block"),  # mul, add
    }
    leaves = {n["leaf"] for n in nested["nodes"] if n["leaf"]}
    assert {"block.fc.weight", "block.fc.bias"} <= leaves


def test_reentrant_recompute_of_a_library_module_gets_the_checkpoint_line() -> None:
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    x = torch.randn(2, 4, requires_grad=True)

    def run() -> None:
        y = checkpoint(body, x, use_reentrant=True)  # @ckpt-body
        y.sum().backward()

    _, nested = traced(run)
    line = line_of("ckpt-body")
    assert spots(nested) == {(line, "body.0"), (line, "body.1")}


def test_reentrant_recompute_gradients_bit_identical() -> None:
    def grads(on: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        block, head = Block(), nn.Linear(4, 1)
        x = torch.randn(2, 4, requires_grad=True)

        def run() -> None:
            head(checkpoint(block, x, use_reentrant=True)).sum().backward()

        if on:
            traced(run)
        else:
            run()
        return [x.grad, *(p.grad for p in block.parameters()), *(p.grad for p in head.parameters())]

    plain, with_backstep = grads(False), grads(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, with_backstep, strict=True))
