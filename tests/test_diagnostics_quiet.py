"""The fast path of a batch (``EventRules.quiet_nodes``) reads saved lists it has not seen yet
itself, as ``node`` does: the same diagnoses, and the same memory of which pass freed what (a
later pass that goes through a freed graph names the pass that freed it from that memory)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from backstep.engine.diagnostics import Diagnostician
from backstep.engine.diagnostics.rules import EventRules
from backstep.engine.recorder import ListRecorder
from tests.diagnostics_feed import feed

CALLER = {"file": "t.py", "line": 7, "code": "loss.backward()"}
FINITE = {"shape": [], "dtype": "float32", "min": 1.0, "max": 1.0, "mean": 1.0, "norm": 1.0,
          "nonfinite": 0}
SECOND_TIME = ("Trying to backward through the graph a second time (or directly access saved "
               "tensors after they have already been freed).")


def _saved(rng: random.Random) -> Any:
    """A saved list made for this node alone (never seen before), as a pass that saves a
    parameter at a new version makes them."""
    kind = rng.choice(["none", "alive", "alive", "freed", "unknown", "scalar", "modified",
                       "unreadable"])
    if kind == "none":
        return []
    if kind == "modified":
        return [{"name": "self", "status": "modified", "version": {"saved": 0, "now": 1}}]
    if kind == "unreadable":
        return ["not a record"]
    return [{"name": "self", "status": kind}, {"name": "other", "status": "scalar"}]


def _passes(seed: int) -> list[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """Passes of nodes with fresh saved lists, some kept with retain_graph, then a pass that
    goes through earlier graphs a second time (graph_freed: which pass freed each)."""
    rng = random.Random(seed)
    out = []
    earlier: list[int] = []
    for number in range(1, 9):
        last = number == 8
        ids = rng.sample(earlier, 6) if last else [100 * number + k for k in range(6)]
        begin = {"event": "pass_begin", "pass": number, "retain_graph": rng.random() < 0.25,
                 "caller": CALLER, "roots": [ids[0]],
                 "nodes": [{"id": i, "name": "MulBackward0", "next": [],
                            "source": {"file": "t.py", "line": i, "code": f"y{i} = x * w"}}
                           for i in ids]}
        batch: list[dict[str, Any]] = []
        for step, node_id in enumerate(ids, start=1):
            error = SECOND_TIME if last and rng.random() < 0.7 else None
            batch.append({"event": "node", "pass": number, "step": step, "id": node_id,
                          "name": "MulBackward0", "grad_outputs": [FINITE],
                          "grad_inputs": [FINITE, None], "saved": _saved(rng), "error": error})
            if rng.random() < 0.3:
                batch.append({"event": "accumulate", "pass": number, "leaf": "w",
                              "id": node_id, "before": FINITE, "after": FINITE,
                              "retained": False, "version": rng.choice([number, None])})
        earlier += ids
        end = {"event": "pass_end", "pass": number, "status": "ok", "error": None,
               "skipped": []}
        out.append((begin, batch, end))
    return out


def _run(seed: int, batched: bool) -> tuple[list[dict[str, Any]], Diagnostician, int]:
    recorder = ListRecorder()
    doctor = Diagnostician(recorder)
    calls = [0]
    node = doctor._rules.node

    def counted(event: dict[str, Any]) -> Any:
        calls[0] += 1
        return node(event)

    doctor._rules.node = counted  # type: ignore[method-assign]
    feed(doctor, _passes(seed), batched)
    return recorder.events, doctor, calls[0]


def _memory(rules: EventRules) -> tuple[Any, ...]:
    return (list(rules.freed_by.items()),
            [(saved, statuses, *flags) for saved, statuses, *flags in rules._statuses.values()])


@pytest.mark.parametrize("seed", range(16))
def test_unseen_saved_lists_are_read_in_the_batch_as_one_by_one(seed: int) -> None:
    one_by_one, doctor, slow = _run(seed, batched=False)
    batched, fast_doctor, fast_slow = _run(seed, batched=True)
    assert batched == one_by_one
    assert _memory(fast_doctor._rules) == _memory(doctor._rules)
    # in the batch only the nodes ``node`` must look at went through it: errors, modified
    # tensors, and a list it fails to read; every other saved list was read on the fast path
    looked_at = sum(1 for _, batch, _ in _passes(seed) for e in batch if e["event"] == "node"
                    and (e["error"] or any(s == "not a record" or s.get("status") == "modified"
                                           for s in e["saved"])))
    assert fast_slow == looked_at < slow
    freed = [e for e in one_by_one if e["event"] == "diagnosis" and e["kind"] == "graph_freed"]
    assert any("already went through this graph" in e["message"] and "pass " in e["message"]
               for e in freed)


def test_quiet_nodes_reads_a_new_saved_list_and_stops_where_node_must_look() -> None:
    rules = EventRules()
    rules.feed({"event": "pass_begin", "pass": 1, "roots": [1], "nodes": [{"id": 1}]})

    def node(node_id: int, saved: Any) -> dict[str, Any]:
        return {"event": "node", "pass": 1, "step": node_id, "id": node_id, "name": "M",
                "grad_outputs": [FINITE], "grad_inputs": [FINITE], "saved": saved,
                "error": None}

    alive = [{"name": "self", "status": "alive"}]
    scalar = [{"name": "alpha", "status": "scalar"}]
    modified = [{"name": "self", "status": "modified"}]
    events = [node(1, alive), node(2, scalar), node(3, modified), node(4, ["unreadable"])]
    assert rules.quiet_nodes(events, 0) == 2  # a modified tensor is ``node``'s to report
    assert list(rules.freed_by.items()) == [(1, 1)]  # alive: freed by this pass; scalar: not
    assert [flags for _, _, *flags in rules._statuses.values()] == [
        [False, True], [False, False], [True, False]]
    assert rules.quiet_nodes(events, 3) == 3  # an unreadable list: ``node`` fails on it
    with pytest.raises(AttributeError):
        rules.node(events[3])
