"""Provenance's forward tags wait in pending_tags, off ``node.metadata``, until first read.

The forward must make no metadata object per node (it fragments glibc's heap: benchmarks'
peak-RSS rows); every reader gets the tags through ``pending_tags.metadata``.
"""

from __future__ import annotations

import gc
import weakref

import torch
from torch import nn

from backstep.engine import pending_tags
from backstep.engine.pending_tags import IF_UNTAGGED, PENDING, metadata, settle
from backstep.engine.provenance import MODULE_KEY, SOURCE_KEY, Provenance, module_of, source_of


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.lin(x) * 2).tanh()


def test_forward_tags_wait_off_the_node_until_read() -> None:
    net = Net()
    x = torch.randn(2, 3, requires_grad=True)
    with Provenance():
        y = net(x)
    node = y.grad_fn
    number = node._sequence_nr()
    assert number in PENDING and PENDING[number][0] is type(node)
    tags = metadata(node)
    assert number not in PENDING  # moved, not copied
    assert tags is node.metadata
    assert tags[MODULE_KEY] == "net"
    assert tags[SOURCE_KEY]["code"] == "return (self.lin(x) * 2).tanh()"
    assert source_of(node) == tags[SOURCE_KEY] and module_of(node) == "net"


def test_a_node_of_another_type_with_the_same_number_gets_nothing() -> None:
    x = torch.randn(2, requires_grad=True)
    y = x * 2
    node = y.grad_fn
    number = node._sequence_nr()

    class Other:
        pass

    PENDING[number] = (Other, {SOURCE_KEY: {"file": "elsewhere.py", "line": 1, "code": "x"}})
    try:
        assert SOURCE_KEY not in metadata(node)
        assert number in PENDING  # left for its own node
    finally:
        PENDING.pop(number, None)


def test_pending_holds_no_node_or_tensor() -> None:
    net = Net()
    x = torch.randn(2, 3, requires_grad=True)
    with Provenance():
        y = net(x)
    number = y.grad_fn._sequence_nr()
    assert number in PENDING
    for kind, tags in PENDING.values():
        assert isinstance(kind, type) and isinstance(tags, dict)
        for value in tags.values():
            assert not isinstance(value, (torch.Tensor, torch.autograd.graph.Node, nn.Module))
    ref = weakref.ref(y)
    del y
    gc.collect()
    assert ref() is None
    PENDING.pop(number, None)


def test_unread_entries_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(pending_tags, "LIMIT", 64)
    x = torch.randn(2, requires_grad=True)
    with Provenance():
        for _ in range(500):
            (x * 2).sum()  # a graph made and dropped, never read
    assert len(PENDING) <= 64


def test_a_region_tag_never_replaces_tags_read_before() -> None:
    read = {SOURCE_KEY: {"file": "a.py", "line": 1, "code": "a"}}
    settle(read, {MODULE_KEY: "net", IF_UNTAGGED: True})
    assert read == {SOURCE_KEY: {"file": "a.py", "line": 1, "code": "a"}}
    fresh: dict = {}
    settle(fresh, {MODULE_KEY: "net", IF_UNTAGGED: True})
    assert fresh == {MODULE_KEY: "net"}
    later = {MODULE_KEY: "old"}
    settle(later, {MODULE_KEY: "new"})  # the mode's write, after a read: as written directly
    assert later == {MODULE_KEY: "new"}


def test_gradients_and_tags_after_a_backward_match() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 3, requires_grad=True)
    plain = torch.autograd.grad(net(x).sum(), [x, *net.parameters()])
    with Provenance():
        y = net(x)
    traced = torch.autograd.grad(y.sum(), [x, *net.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(plain, traced, strict=True))
    assert module_of(y.grad_fn) == "net"  # read: in the node's metadata now
    assert y.grad_fn.metadata[MODULE_KEY] == "net"
