"""``pass_begin``'s listing reused while passes keep their shape (``capture.listings``): a trace
written through the template is byte for byte the one the full path writes, a pass whose shape
changed in any part the listing shows is never taken for the one before, and the reuse keeps no
node or tensor of a pass alive after it."""

from __future__ import annotations

import gc
import itertools
import json
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from tests.engine_models import Square, TwoPart
from tests.listing_traces import listing_trace


def _training_loop() -> None:
    torch.manual_seed(0)
    model = TwoPart()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    for _ in range(4):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()


def test_a_repeated_shape_is_written_from_the_template_exactly_as_in_full() -> None:
    full, none_reused = listing_trace(False, _training_loop)
    reused, count = listing_trace(True, _training_loop)
    assert none_reused == 0
    assert count == 3  # passes 2 to 4: the second sighting of a shape makes its template
    assert reused == full
    assert full.count(b'"event":"pass_begin"') == 4


class Scale(nn.Module):
    def __init__(self, weight: nn.Parameter) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


def _step(x: torch.Tensor, w: Any, op: str = "mul", flip: bool = False,
          elsewhere: bool = False) -> None:
    """One pass whose every node comes from the same lines, whatever the arguments (but
    ``elsewhere``: the same nodes from another line)."""
    if isinstance(w, nn.Module):
        out = w(x)
    elif not elsewhere:
        out = (w * x if flip else x * w) if op == "mul" else (w + x if flip else x + w)
    else:
        out = (w * x if flip else x * w) if op == "mul" else (w + x if flip else x + w)
    del w  # the leaf is named in the caller's frame: w1 or w2
    out.sum().backward()


# (the one part of its listing a pass changes from the pass before, or None: many; the step's
# arguments). A shape is seen twice or more before it changes: its template is ready by then.
_PLAN = [
    ("", ("w1",)), ("", ("w1",)), ("", ("w1",)),
    ("leaf", ("w2",)), ("", ("w2",)),
    ("name", ("w2", "add")), ("", ("w2", "add")),
    ("next", ("w2", "add", True)), ("", ("w2", "add", True)),
    ("source", ("w2", "add", True, True)), ("", ("w2", "add", True, True)),
    (None, ("first",)), ("", ("first",)),
    ("module", ("second",)), ("", ("second",)),
]


def _changing_shapes() -> None:
    torch.manual_seed(0)
    x = torch.randn(3)
    w1 = nn.Parameter(torch.randn(3))
    w2 = nn.Parameter(torch.randn(3))
    first, second = Scale(w1), Scale(w1)  # one parameter, two module paths
    held = {"w1": w1, "w2": w2, "first": first, "second": second}
    for _, (name, *rest) in _PLAN:
        _step(x, held[name], *rest)


def _listings(trace: bytes) -> list[list[dict[str, Any]]]:
    events = [json.loads(line) for line in trace.splitlines()]
    out = []
    for event in events:
        if event["event"] == "pass_begin":  # ids are new every pass: edges as positions
            position = {n["id"]: k for k, n in enumerate(event["nodes"])}
            table = event.get("sources", [])  # nodes name their source by its index here
            out.append([{**n, "id": None, "next": [position.get(j) for j in n["next"]],
                         "source": table[n["source"]] if "source" in n else None}
                        for n in event["nodes"]])
    return out


def test_a_changed_shape_is_never_taken_for_the_one_before() -> None:
    full, _ = listing_trace(False, _changing_shapes)
    reused, count = listing_trace(True, _changing_shapes)
    assert count > 0
    assert reused == full
    # each planned change is real: the listing differs from the pass before in that part only
    listings = _listings(full)
    for k, (change, _) in enumerate(_PLAN[1:], start=1):
        before, now = listings[k - 1], listings[k]
        if change is None:
            continue
        differs = {key for a, b in zip(before, now, strict=True) for key in {*a, *b}
                   if a.get(key) != b.get(key)}
        assert differs == ({change} if change else set()), (k, change, differs)


def test_reused_listing_keeps_no_node_or_tensor_of_its_pass() -> None:
    class Probe:
        """Lives in a node's metadata: it dies with the node."""

    refs: list[weakref.ref] = []
    w = torch.randn(3, requires_grad=True)

    def steps() -> None:
        for _ in range(4):
            inner = w * 3  # saved by Square's node: alive as long as that node is
            loss = Square.apply(inner).sum()
            loss.grad_fn.metadata["probe"] = probe = Probe()
            refs.extend([weakref.ref(probe), weakref.ref(inner)])
            del probe, inner
            loss.backward()
            del loss
            gc.collect()  # while capture and its listings live: the pass's are gone
            alive.append(sum(r() is not None for r in refs))

    alive: list[int] = []
    _, count = listing_trace(True, steps)
    assert count == 3
    assert alive == [0, 0, 0, 0]


@pytest.mark.parametrize("reuse", [False, True])
def test_gradients_are_the_same_with_and_without_reuse(reuse: bool) -> None:
    def run() -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = TwoPart()
        x = torch.randn(5, 4)
        for _ in range(3):
            model.zero_grad()
            model(x).pow(2).mean().backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = run()
    traced: list[torch.Tensor] = []
    listing_trace(reuse, lambda: traced.extend(run()))
    assert all(torch.equal(a, b) for a, b in zip(plain, traced, strict=True))


def test_communication_labels_are_part_of_the_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP's labels (``sharded.comm_points``) change while the graph keeps its shape: a
    listing written from the template must carry this pass's labels, as the full path does."""
    from backstep.engine import sharded

    def labels(counter: itertools.count) -> Callable[..., dict[int, str]]:
        def comm_points(nodes: list[Any], names: list[str]) -> dict[int, str]:
            step = next(counter)
            return {0: "reduce-scatter"} if step % 3 else {1: "all-gather"}
        return comm_points

    monkeypatch.setattr(sharded, "comm_points", labels(itertools.count()))
    full, _ = listing_trace(False, _training_loop)
    monkeypatch.setattr(sharded, "comm_points", labels(itertools.count()))
    reused, count = listing_trace(True, _training_loop)
    assert b'"comm":"all-gather"' in full and b'"comm":"reduce-scatter"' in full
    assert reused == full
    assert count >= 1
