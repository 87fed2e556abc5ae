"""Node events folded in as ``f`` and ``c`` run through a pass: the model makes no snapshot per
node (one when asked, or when the next other event comes), and no summary or saved list until a
panel reads the record; what is read then is what reading the event at once gave. Read from a
channel, a record keeps the event's line, not its decoded lists, for the garbage collector to
walk (every full collection walked all of them)."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from backstep.tui.runtime.reader import Reader
from backstep.tui.state import model as model_module
from backstep.tui.state import records
from backstep.tui.state.model import SessionModel
from backstep.tui.state.node_record import saved_infos
from backstep.tui.state.records import summaries_of
from tests.line_channel import Lines
from tests.tui_fixtures import chain_pass, summary

NODES = 300


def node_event(node_id: int) -> dict[str, Any]:
    return {"event": "node", "pass": 1, "step": node_id, "id": node_id,
            "name": f"Op{node_id % 7}Backward0",
            "grad_outputs": [summary([0.5 * node_id, -1.0])],
            "grad_inputs": [summary([float(node_id), 2.0]), None],
            "saved": [{"name": "self", "status": "alive", "shape": [2], "dtype": "float32",
                       "bytes": 8 * node_id},
                      {"name": "exponent", "status": "alive", "value": node_id}],
            "error": None}


def begun() -> SessionModel:
    model = SessionModel()
    model.apply({"event": "session", "version": 2, "torch": "t", "argv": ["x.py"], "pid": 1})
    model.apply(chain_pass(NODES))
    return model


def test_node_events_make_no_snapshot_and_no_summary_until_one_is_wanted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = begun()
    copies, made = [], []
    evolve, summary_of = model_module.replace, records.summary_of
    monkeypatch.setattr(model_module, "replace", lambda *a, **k: copies.append(1) or evolve(*a, **k))
    monkeypatch.setattr(records, "summary_of", lambda v: made.append(1) or summary_of(v))
    for node_id in range(1, NODES + 1):
        assert model.apply(node_event(node_id))  # changed: drawn with the next snapshot
    assert len(copies) < 10  # was four a node: a view and three snapshots
    assert not made
    view = model.snapshot().pass_
    assert view is not None and view.done == NODES and model.snapshot().running
    assert not made  # the snapshot counts records; it reads none
    assert view.saved_totals() == (0, sum(8 * i for i in range(1, NODES + 1)))
    assert not made  # the saved panel's totals sum the raw sizes


def test_a_record_read_later_is_the_record_read_at_once() -> None:
    model = begun()
    events = [node_event(node_id) for node_id in range(1, NODES + 1)]
    for event in events:
        model.apply(event)
    model.apply({"event": "stopped", "pass": 1, "step": NODES + 1, "id": NODES,
                 "name": "AccumulateGrad", "reason": "step"})
    view = model.snapshot().pass_
    assert view is not None and model.snapshot().stop is not None and view.done == NODES
    for k, event in enumerate(events):
        record = view.record(event["id"])
        assert record is not None and record.index == k and record.step == event["step"]
        assert record.grad_outputs == summaries_of(event["grad_outputs"])
        assert record.grad_inputs == summaries_of(event["grad_inputs"])
        assert record.saved == saved_infos(event["saved"])
        assert record.saved[1].value == str(event["id"])  # a scalar's value, as text
        assert record.saved_bytes == 8 * event["id"]
    assert view.record(NODES + 1) is None  # the leaf never ran


def test_a_duplicate_node_event_is_ignored_before_any_snapshot() -> None:
    model = begun()
    model.apply(node_event(1))
    assert not model.apply(node_event(1))
    model.apply(node_event(2))
    view = model.snapshot().pass_
    assert view is not None and view.executed() == [1, 2]


def read(events: list[dict[str, Any]]) -> Reader:
    reader = Reader(lambda message: None)
    reader.resumed(through=True)
    reader.run(Lines(events))
    return reader


def test_records_read_from_lines_are_what_the_events_said_and_cost_the_collector_little() -> None:
    events = [node_event(node_id) for node_id in range(1, NODES + 1)]
    start = [{"event": "session", "version": 2, "torch": "t", "argv": ["x.py"], "pid": 1},
             chain_pass(NODES)]
    gc.collect()
    before = len(gc.get_objects())
    reader = read([*start, *events])
    gc.collect()
    tracked = len(gc.get_objects()) - before
    view = reader.model.snapshot().pass_
    assert view is not None and view.done == NODES
    # the graph's listing and a record a node: about 4 a node (decoded lists kept: 15)
    assert tracked < 6 * NODES
    expected = begun()
    for event in events:
        expected.apply(event)
    want = expected.snapshot().pass_
    assert want is not None
    assert view.saved_totals() == want.saved_totals()
    for event in events:
        got, same = view.record(event["id"]), want.record(event["id"])
        assert got is not None and same is not None
        assert (got.grad_outputs, got.grad_inputs, got.saved, got.error) == \
            (same.grad_outputs, same.grad_inputs, same.saved, same.error)


def test_a_line_that_no_longer_reads_as_checked_gives_an_empty_record() -> None:
    source = Lines([])
    reader = Reader(lambda message: None)
    reader.run(source)  # the reader's way to read a line again
    reread = reader.model.reread
    assert reread is not None
    assert reread(b'{"event": "node", "pass": 1, "id": 1, "name": "x", "saved": 3}\n') is None
    assert reread(b"not json\n") is None
    event = reread(json.dumps(node_event(1)).encode())
    assert event is not None and event["saved"][0]["status"] == "alive"
