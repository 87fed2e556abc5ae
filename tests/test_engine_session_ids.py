"""Node ids count from 1 in each session, as pass numbers do: ``attach()`` run again in a
notebook shows "pass 1" with nodes from #1, not numbers carried on from the last session; a
node retained from that session gets a fresh id, never one a new node has (issue 50 item 8)."""

from __future__ import annotations

import io
import json

import torch

from backstep.engine.capture import Capture
from backstep.engine.recorder import JsonlRecorder


def _session(steps) -> list[dict]:  # type: ignore[no-untyped-def]
    stream = io.BytesIO()
    capture = Capture(JsonlRecorder(stream))
    capture.install()
    try:
        steps()
    finally:
        capture.uninstall()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def _ids(events: list[dict]) -> list[list[int]]:
    return [[n["id"] for n in e["nodes"]] for e in events if e["event"] == "pass_begin"]


def test_each_session_numbers_its_nodes_from_one_and_never_twice() -> None:
    w = torch.randn(3, requires_grad=True)
    kept = (w * 2).sin()  # its graph is retained across both sessions

    def first() -> None:
        (w * w).sum().backward()
        kept.sum().backward(retain_graph=True)

    def second() -> None:
        (w * w).sum().backward()
        (kept.sum() + (w * 3).sum()).backward(retain_graph=True)

    _session(first)
    passes = _ids(_session(second))
    assert passes[0] == [1, 2, 3]  # as in a fresh process: not carried on from the first
    # the retained nodes, numbered in the first session, got fresh numbers in this one,
    # after those of its first pass: no two nodes of a pass share an id
    assert len(set(passes[1])) == len(passes[1])
    assert sorted(passes[1]) == [3, *range(4, 4 + len(passes[1]) - 1)], passes
