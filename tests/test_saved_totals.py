"""A pass's saved-tensor totals, kept as running sums, are the plain sum over the pass at every
step: forward, back (a snapshot sees a prefix), after a live log forgot unpublished records, with
a stop's own tensors, and with and without retain_graph."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from backstep.tui.state.model import SessionModel
from backstep.tui.state.records import Stop
from backstep.tui.state.snapshot import PassView


def naive(view: PassView, stop: Stop | None) -> tuple[int, int]:
    """saved_totals as it was first written: one walk over the pass per call."""
    held = freed = 0
    seen: set[int] = set()
    for node_id in view.executed():
        seen.add(node_id)
        size = sum(s.bytes for s in view.log.records[node_id].saved)
        if view.retain_graph:
            held += size
        else:
            freed += size
    if stop is not None and stop.pass_ == view.number and stop.id not in seen:
        seen.add(stop.id)
        held += sum(s.bytes for s in stop.saved if s.status != "freed")
    for info in view.graph.nodes.values():
        if info.id not in seen and info.saved_bytes:
            held += info.saved_bytes
    return held, freed


def saved(rng: random.Random) -> list[dict[str, Any]]:
    return [{"name": f"t{i}", "status": rng.choice(["alive", "freed", "modified"]),
             "shape": [2], "dtype": "float32", "bytes": rng.randrange(1, 1000)}
            for i in range(rng.randrange(0, 3))]


def node_event(k: int, node_id: int, rng: random.Random) -> dict[str, Any]:
    return {"event": "node", "pass": 1, "step": k + 1, "id": node_id, "name": "x",
            "grad_outputs": [], "grad_inputs": [], "saved": saved(rng), "error": None}


def begin(model: SessionModel, rng: random.Random, n: int, retain: bool) -> None:
    nodes = [{"id": i, "name": f"N{i}", "next": [i + 1] if i + 1 < n else [],
              "saved_bytes": rng.choice([None, 0, rng.randrange(1, 5000)])} for i in range(n)]
    model.apply({"event": "pass_begin", "pass": 1, "retain_graph": retain, "nodes": nodes,
                 "roots": [0]})


@pytest.mark.parametrize("seed", range(6))
def test_running_totals_are_the_plain_sum(seed: int) -> None:
    rng = random.Random(seed)
    n = 40
    model = SessionModel()
    begin(model, rng, n, retain=seed % 2 == 1)
    snaps = [model.snapshot()]
    order = list(range(n)) + [1000]  # a node the graph does not list
    rng.shuffle(order)
    checked = 0
    for k, node_id in enumerate(order):
        model.apply({"event": "stopped", "pass": 1, "step": k + 1, "id": node_id,
                     "name": "x", "reason": "step", "grad_outputs": [], "saved": saved(rng)})
        snaps.append(model.snapshot())
        model.apply(node_event(k, node_id, rng))
        snaps.append(model.snapshot())
        for snap in rng.sample(snaps, min(4, len(snaps))):  # any earlier moment, in any order
            view = snap.pass_
            assert view is not None
            assert view.saved_totals(snap.stop) == naive(view, snap.stop)
            assert view.saved_totals() == naive(view, None)
            checked += 1
    assert checked > 100


def test_forgotten_records_leave_the_totals() -> None:
    """Records past a view's end forgotten (``truncate``) and others run in their place: the
    running totals follow the log as it is now."""
    rng = random.Random(7)
    model = SessionModel()
    begin(model, rng, 12, retain=False)
    for k in range(8):
        model.apply(node_event(k, k, rng))
    view = model.snapshot().pass_
    assert view is not None
    assert view.saved_totals() == naive(view, None)
    short = replace(view, done=5)
    short.log.truncate(5)
    assert short.saved_totals() == naive(short, None)
    for k in range(5, 10):  # others ran where the forgotten ones were
        rec = short.log.records.pop(k, None)
        assert rec is None or rec.index >= 5
    model._views[1] = short
    for k, node_id in enumerate([9, 11, 5], start=5):
        model.apply(node_event(k, node_id, rng))
    after = model.snapshot().pass_
    assert after is not None and after.executed() == [0, 1, 2, 3, 4, 9, 11, 5]
    assert after.saved_totals() == naive(after, None)
