"""The event schema at the edge (issue 29): a malformed event is one line naming the file, the
line and the field, wherever it comes in: a trace read by show (skipped), by diff or export
(refused, exit 2), or a live event from a peer (reported, skipped)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backstep.events.form import expand
from backstep.events.spec import check
from backstep.traces.index import TraceIndex
from backstep.traces.passes import MalformedEvent
from backstep.tui.messages import ServerError, SnapshotReady
from backstep.tui.runtime.reader import Reader
from tests.replay_traces import record

BASE = Path(__file__).parent / "fixtures" / "small_trace.jsonl"


def base_events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in BASE.read_text().splitlines()]


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_the_recorder_s_events_fit_the_schema() -> None:
    assert [check(e) for e in base_events()] == [None] * len(base_events())


@pytest.mark.parametrize(("event", "why"), [
    ({"event": [], "pass": 1}, "field event: expected str, got list"),
    ({"pass": 1}, "field event: missing"),
    ({"event": "node", "pass": 1, "name": "A"}, "field id: missing"),
    ({"event": "node", "pass": 1, "id": 1, "name": "A", "grad_outputs": ["x"]},
     "field grad_outputs[0]: expected summary object or null, got str"),
    ({"event": "node", "pass": 1, "id": 1, "name": "A", "grad_inputs": [{"norm": "big"}]},
     "field grad_inputs[0].norm: expected number or null, got str"),
    ({"event": "node", "pass": float("nan"), "id": 1, "name": "A"},
     "field pass: expected int, got float nan"),
    ({"event": "pass_begin", "pass": 1, "nodes": [{"id": 1, "name": "A", "source": "x.py"}]},
     "field nodes[0].source: expected {file, line, code} or null, got str"),
    ({"event": "pass_begin", "pass": 1, "nodes": [{"id": 1}]}, "field nodes[0].name: missing"),
    ({"event": "pass_begin", "pass": 1, "nodes": [{"id": 1, "name": "A", "next": [2, "3"]}]},
     "field nodes[0].next[1]: expected int or null, got str"),
    ({"event": "pass_end", "pass": True}, "field pass: expected int, got bool"),
    ({"event": "accumulate", "pass": 10**30}, "field pass: expected int, got an int out of range"),
])
def test_a_malformed_event_is_one_line_naming_the_field(event: dict[str, Any], why: str) -> None:
    assert check(event) == why


# What the recorder writes at the edges of the schema: a slice saves its end as INT64_MAX,
# autograd.grad names an input outside the graph by a null id, complex and sparse gradients, a
# saved-tensor hook (checkpoint), create_graph, an in-place error, diagnoses, output, sys.exit.
EDGES = """\
import sys
import torch
from torch.utils.checkpoint import checkpoint
x = torch.randn(6, 4, requires_grad=True)
x[1:, ::2].exp().sum().backward()
a, unused = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
torch.autograd.grad((a * 2).sum(), [a, unused], allow_unused=True)
c = torch.randn(3, dtype=torch.complex64, requires_grad=True)
(c * c).abs().sum().backward()
torch.nn.Embedding(10, 3, sparse=True)(torch.tensor([1, 2])).sum().backward()
z = torch.randn(4, requires_grad=True)
torch.where(z > 0, z.sqrt(), z).sum().backward()
checkpoint(lambda t: torch.sin(t) * 2, z, use_reentrant=False).sum().backward()
torch.nn.ModuleDict({"[/]": torch.nn.Linear(4, 4)})["[/]"](x).pow(2).mean().backward(
    create_graph=True)
r = torch.randn(3, requires_grad=True).sigmoid()
r.mul_(2)
print("printed")
try:
    r.sum().backward()
except RuntimeError:
    pass
sys.exit("bye")
"""


def test_every_event_a_real_run_records_fits(tmp_path: Path) -> None:
    trace = record(tmp_path, "edges", EDGES)
    events = [expand(json.loads(line)) for line in trace.read_text().splitlines()]
    assert {"session", "pass_begin", "node", "accumulate", "pass_end", "diagnosis", "output",
            "exit"} <= {e["event"] for e in events}
    assert [(e["event"], check(e)) for e in events if check(e) is not None] == []


def test_what_the_recorder_writes_at_its_edges_fits() -> None:
    """A slice saves its end as INT64_MAX; an input of autograd.grad outside the graph is a
    null id; a failed node has no step."""
    assert check({"event": "node", "pass": 1, "step": None, "id": 3, "name": "SliceBackward0",
                  "saved": [{"name": "end", "status": "scalar", "value": 2**63 - 1},
                            {"name": "sizes", "status": "scalar", "value": [2**63 - 1, -1]}],
                  "error": "boom"}) is None
    assert check({"event": "pass_begin", "pass": 1, "roots": [1], "inputs": [1, None]}) is None


def test_unknown_events_and_fields_pass_the_stream_is_extended_freely() -> None:
    assert check({"event": "something_new", "pass": []}) is None
    assert check({"event": "node", "pass": 1, "id": 1, "name": "A", "new_field": [{}]}) is None


def test_show_skips_a_malformed_event_and_says_where_diff_and_export_refuse_it(
        tmp_path: Path) -> None:
    events = base_events()
    events[0]["version"] = "1"  # the session line
    events[3]["saved"] = {"name": "self"}  # a node line: found when its pass is read
    trace = write(tmp_path / "m.jsonl", events)
    with TraceIndex(trace) as index:
        assert index.note() == (f"m.jsonl: 1 malformed event(s) skipped (first: {trace}:1: "
                                "field version: expected int or null, got str)")
        steps = index.read(1).steps
        assert [e["step"] for e in steps] == [1, 3, 4, 5, 6, 7, 8]
        assert list(index.rejected.values())[-1] == (
            f"{trace}:4: field saved: expected list of saved tensors or null, got object")
    with pytest.raises(MalformedEvent, match=r"m\.jsonl:1: field version: expected int or null"):
        TraceIndex(trace, strict=True)
    events[0]["version"] = 1
    write(trace, events)
    with TraceIndex(trace, strict=True) as index, \
            pytest.raises(MalformedEvent, match=r"m\.jsonl:4: field saved: expected list"):
        index.read(1)


def test_a_pass_event_whose_pass_is_not_a_number_is_refused_not_ignored(tmp_path: Path) -> None:
    events = base_events()
    events[4]["pass"] = "1"
    trace = write(tmp_path / "m.jsonl", events)
    with pytest.raises(MalformedEvent, match=r"m\.jsonl:5: field pass: expected int, got str"):
        TraceIndex(trace, strict=True)


class Events:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = list(events)

    def receive(self) -> dict[str, Any] | None:
        return self.events.pop(0) if self.events else None


def test_a_malformed_live_event_is_reported_in_one_line_and_skipped() -> None:
    posted: list[Any] = []
    events = base_events()
    bad = {**events[2], "grad_outputs": ["x"]}
    Reader(posted.append).run(Events([events[0], events[1], bad, events[3]]))
    errors = [m.message for m in posted if isinstance(m, ServerError)]
    assert errors == ["malformed event from the debuggee: field grad_outputs[0]: expected "
                      "summary object or null, got str"]
    shown = [m for m in posted if isinstance(m, SnapshotReady)][-1].snapshot.pass_
    assert shown is not None and list(shown.log.executed) == [events[3]["id"]]
