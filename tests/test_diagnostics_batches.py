"""Diagnostics of a batch of events (``Diagnostician.emit_many``, how a recorded pass hands on
its node and accumulate events) are those of the same events emitted one by one: the same
events and diagnoses, in the same order, also when analysing one sets off another event."""

from __future__ import annotations

from typing import Any

import pytest

from backstep.engine.diagnostics import Diagnostician
from backstep.engine.recorder import ListRecorder
from tests.diagnostics_feed import feed

CALLER = {"file": "t.py", "line": 7, "code": "loss.backward()"}
FINITE = {"shape": [], "dtype": "float32", "min": 1.0, "max": 1.0, "mean": 1.0, "norm": 1.0,
          "nonfinite": 0}
NAN = {**FINITE, "min": "nan", "max": "nan", "nonfinite": 1}


def _passes() -> list[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """Three passes of ``w`` updated by hand and never zeroed (grad_accumulating at the third),
    the first kept with retain_graph (released unused: retain_graph_unused), the second handed
    a NaN gradient at its root (nonfinite)."""
    out = []
    for number in (1, 2, 3):
        base = 10 * number
        begin = {"event": "pass_begin", "pass": number, "retain_graph": number == 1,
                 "caller": CALLER, "roots": [base], "nodes": [
                     {"id": base, "name": "SumBackward0", "next": [base + 1]},
                     {"id": base + 1, "name": "MulBackward0", "next": [base + 2, None]},
                     {"id": base + 2, "name": "AccumulateGrad", "next": [], "leaf": "w"},
                     {"id": base + 3, "name": "AccumulateGrad", "next": [], "leaf": "b"}]}
        root_in = NAN if number == 2 else FINITE
        before = None if number == 1 else FINITE
        batch: list[dict[str, Any]] = [
            {"event": "node", "pass": number, "step": 1, "id": base, "name": "SumBackward0",
             "grad_outputs": [root_in], "grad_inputs": [root_in], "saved": [], "error": None},
            {"event": "node", "pass": number, "step": 2, "id": base + 1, "name": "MulBackward0",
             "grad_outputs": [root_in], "grad_inputs": [root_in, None], "saved": [],
             "error": None},
            {"event": "node", "pass": number, "step": 3, "id": base + 2,
             "name": "AccumulateGrad", "grad_outputs": [FINITE], "grad_inputs": [],
             "saved": [], "error": None},
            {"event": "accumulate", "pass": number, "leaf": "w", "id": base + 2,
             "before": before, "after": FINITE, "retained": False, "version": number - 1},
            {"event": "node", "pass": number, "step": 4, "id": base + 3,
             "name": "AccumulateGrad", "grad_outputs": [FINITE], "grad_inputs": [],
             "saved": [], "error": None},
            {"event": "accumulate", "pass": number, "leaf": "b", "id": base + 3,
             "before": None, "after": FINITE, "retained": False, "version": 0}]
        end = {"event": "pass_end", "pass": number, "status": "ok", "error": None,
               "skipped": []}
        out.append((begin, batch, end))
    return out


def _run(batched: bool, set_off: bool) -> list[dict[str, Any]]:
    recorder = ListRecorder()
    doctor = Diagnostician(recorder)
    if set_off:  # the retained graph's release lands while a leaf's accumulation is analysed
        analyse = doctor._manual.accumulate
        calls = []

        def accumulate(event: dict[str, Any]) -> None:
            calls.append(event)
            analyse(event)
            if len(calls) == 3:
                doctor.emit({"event": "graph_released", "pass": 1, "reused": False,
                             "bytes": 64})

        doctor._manual.accumulate = accumulate  # type: ignore[method-assign]
    feed(doctor, _passes(), batched)
    doctor.emit({"event": "exit", "code": 0, "traceback": None})  # retain_graph is judged here
    return recorder.events


@pytest.mark.parametrize("set_off", [False, True])
def test_a_batch_is_diagnosed_as_its_events_one_by_one(set_off: bool) -> None:
    one_by_one = _run(batched=False, set_off=set_off)
    kinds = [e["kind"] for e in one_by_one if e["event"] == "diagnosis"]
    assert sorted(kinds) == sorted(["nonfinite", "grad_accumulating"]
                                   + (["retain_graph_unused"] if set_off else []))
    batched = _run(batched=True, set_off=set_off)
    assert [e["event"] for e in batched] == [e["event"] for e in one_by_one]
    assert batched == one_by_one


def _random_passes(seed: int) -> list[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """Passes of random node and accumulate events: non-finite counts (known, unknown, none),
    roots, saved tensors alive, freed or modified, errors, leaves zeroed or not."""
    import random

    rng = random.Random(seed)
    counts = [0, 0, 0, 1, 3, None]
    out = []
    for number in range(1, 13):
        ids = [100 * number + k for k in range(6)]
        begin = {"event": "pass_begin", "pass": number, "retain_graph": rng.random() < 0.2,
                 "caller": CALLER, "roots": [ids[0]],
                 "nodes": [{"id": i, "name": rng.choice(["MulBackward0", "DivBackward0",
                                                          "AccumulateGrad"]),
                            "next": [], "source": {"file": "t.py", "line": i, "code": "x"}}
                           for i in ids]}
        batch: list[dict[str, Any]] = []
        for step, node_id in enumerate(rng.sample(ids, len(ids)), start=1):
            def summary() -> dict[str, Any] | None:
                return None if rng.random() < 0.1 else {**FINITE,
                                                        "nonfinite": rng.choice(counts)}
            saved = rng.choice([[], [], [{"name": "self", "status": "alive"}],
                                [{"name": "other", "status": "freed"}],
                                [{"name": "self", "status": "modified",
                                  "version": {"saved": 0, "now": 1}}]])
            batch.append({"event": "node", "pass": number, "step": step, "id": node_id,
                          "name": "MulBackward0", "grad_outputs": [summary()],
                          "grad_inputs": [summary(), summary()], "saved": saved,
                          "error": "boom" if rng.random() < 0.05 else None})
            if rng.random() < 0.4:
                leaf = rng.choice(["w", "b", "v"])
                batch.append({"event": "accumulate", "pass": number, "leaf": leaf,
                              "id": node_id, "before": rng.choice([None, FINITE,
                                                                   {**FINITE, "min": 0.0,
                                                                    "max": 0.0}]),
                              "after": FINITE, "retained": False,
                              "version": rng.choice([number, number - 1, None])})
        end = {"event": "pass_end", "pass": number, "status": "ok", "error": None,
               "skipped": []}
        out.append((begin, batch, end))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_batches_are_diagnosed_as_their_events_one_by_one(seed: int) -> None:
    results = []
    for batched in (False, True):
        recorder = ListRecorder()
        feed(Diagnostician(recorder), _random_passes(seed), batched)
        results.append(recorder.events)
    assert results[1] == results[0]
    assert any(e["event"] == "diagnosis" for e in results[0])
