"""``gradient_edge`` reads a root's node as ``torch.autograd.graph.get_gradient_edge`` does,
without making the ownership token that function makes for a custom Function's output (a
view node, and a sequence number, each pass that plain PyTorch never spends)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.autograd.graph import get_gradient_edge

from backstep.engine.graph import gradient_edge
from tests.engine_models import Square


def _items() -> dict[str, Any]:
    leaf = torch.ones(3, requires_grad=True)
    return {
        "non-leaf": (leaf * 2).sum(),
        "custom Function output": Square.apply(leaf),
        "leaf": leaf,
        "second output": torch.ones(4, requires_grad=True).split(2)[1],
    }


@pytest.mark.parametrize("name", list(_items()))
def test_edge_is_get_gradient_edge_s(name: str) -> None:
    item = _items()[name]
    edge = get_gradient_edge(item)
    assert gradient_edge(item) == (edge.node, edge.output_nr)
    assert gradient_edge(edge) == (edge.node, edge.output_nr)


def test_no_edge_for_what_needs_no_gradient() -> None:
    assert gradient_edge(torch.ones(2)) is None
    assert gradient_edge(3.0) is None
    assert gradient_edge(None) is None


def test_a_custom_function_root_makes_no_node() -> None:
    sequence = torch._C._autograd._get_sequence_nr
    root = Square.apply(torch.ones(3, requires_grad=True))
    before = sequence()
    node, _ = gradient_edge(root)  # type: ignore[misc]
    assert sequence() == before
    assert node is root.grad_fn
