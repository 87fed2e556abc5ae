"""A graph built before backstep attached (the loss computed, then ``attach()``, then
``backward()``: the pattern a notebook invites) has no sources and never will; its
``pass_begin`` says so, and the source panel says why and what to do (issue 50 item 5). A graph
built after attaching, or a leaf's own backward, says nothing of the kind."""

from __future__ import annotations

import io
import json
import threading

import torch
from torch import nn

from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import JsonlRecorder


def _begins(before: bool) -> list[dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(5, 3)
    early = model(x).pow(2).mean() if before else None
    stream = io.BytesIO()
    capture = Capture(JsonlRecorder(stream))
    provenance = Provenance()
    provenance.install()
    capture.annotate = annotate
    capture.tagged_since = provenance.since
    capture.install()
    try:
        loss = early if early is not None else model(x).pow(2).mean()
        loss.backward()
        w = torch.ones(2, requires_grad=True)
        w.backward(torch.ones(2))  # a leaf's pass: its root is an AccumulateGrad
        done = []
        thread = threading.Thread(target=lambda: done.append(model(x).sum().backward()))
        thread.start()
        thread.join()
    finally:
        capture.uninstall()
        provenance.uninstall()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [e for e in events if e["event"] == "pass_begin"]


def test_a_graph_built_before_attaching_says_so() -> None:
    first, leaf, other_thread = _begins(before=True)
    assert first.get("before_provenance") is True
    assert "before_provenance" not in leaf and "before_provenance" not in other_thread


def test_a_graph_built_after_attaching_says_nothing_of_it() -> None:
    for begin in _begins(before=False):
        assert "before_provenance" not in begin
