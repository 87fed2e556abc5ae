"""What a trace costs in bytes a node, and that its smaller form reads back whole: the events
show, diff and export read from a file are the ones the live stream carries, for files in the
new form and in the old (every key written out)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import JsonlRecorder, ListRecorder
from backstep.engine.session import session_event
from backstep.events.form import compact_event, expand
from backstep.protocol import encode
from backstep.traces.diff import Tolerance, diff
from backstep.traces.index import TraceIndex

FIXTURE = Path(__file__).parent / "fixtures" / "small_trace.jsonl"


class _Both:
    """A trace file and the live dicts of the same events."""

    def __init__(self, stream: Any) -> None:
        self.file = JsonlRecorder(stream)
        self.kept = ListRecorder()

    def emit(self, event: dict[str, Any]) -> None:
        self.kept.emit(event)
        self.file.emit(event)

    def flush(self) -> None:
        self.file.flush()


def _lstm_pass(scale: float = 1.0, steps: int = 12) -> None:
    """One backward of the time-sequence example's model, unrolled ``steps`` times, in float64:
    two LSTMCells and a Linear, as PyTorch's example trains them with LBFGS."""
    torch.manual_seed(0)
    cell1, cell2, linear = nn.LSTMCell(1, 51).double(), nn.LSTMCell(51, 51).double(), \
        nn.Linear(51, 1).double()
    x = torch.sin(torch.arange(steps + 1, dtype=torch.double).unsqueeze(0) / 20.0
                  + torch.arange(4, dtype=torch.double).unsqueeze(1)) * scale
    h = c = h2 = c2 = torch.zeros(4, 51, dtype=torch.double)
    outputs = []
    for column in x[:, :-1].split(1, dim=1):
        h, c = cell1(column, (h, c))
        h2, c2 = cell2(h, (h2, c2))
        outputs.append(linear(h2))
    nn.functional.mse_loss(torch.cat(outputs, dim=1), x[:, 1:]).backward()


def _record(path: Path, scale: float = 1.0) -> list[dict[str, Any]]:
    with open(path, "wb") as stream:
        both = _Both(stream)
        both.emit(session_event(["lstm.py"]))
        capture = Capture(both)
        capture.install()
        provenance = Provenance()  # sources and module paths, as ``backstep trace`` records
        provenance.install()
        capture.annotate = annotate
        try:
            _lstm_pass(scale)
        finally:
            provenance.uninstall()
            capture.uninstall()
        both.file.close()
    return both.kept.events


def test_a_node_event_of_the_lstm_pass_stays_small(tmp_path: Path) -> None:
    """The float64 LSTM pass: at 17 digits, with every default key and every source written
    out, a node event took 778 bytes and a graph node of its pass_begin 189; now 585 and 79."""
    path = tmp_path / "lstm.jsonl"
    events = _record(path)
    lines = path.read_bytes().splitlines(keepends=True)
    kinds = [json.loads(line)["event"] for line in lines]
    nodes = [len(line) for line, kind in zip(lines, kinds, strict=True) if kind == "node"]
    begin = [line for line, kind in zip(lines, kinds, strict=True) if kind == "pass_begin"]
    graph = [e for e in events if e["event"] == "pass_begin"][0]["nodes"]
    assert len(nodes) > 100 and len(begin) == 1
    assert sum(nodes) / len(nodes) < 650
    assert len(begin[0]) / len(graph) < 110


def test_what_the_file_holds_reads_back_as_the_live_events(tmp_path: Path) -> None:
    path = tmp_path / "lstm.jsonl"
    live = json.loads(json.dumps([e for e in _record(path) if e["event"] != "session"]))
    with TraceIndex(path, strict=True) as index:
        assert index.note() is None
        one = index.read(index.numbers()[0])
        assert one.begin == live[0]
        assert one.steps == [e for e in live if e["event"] == "node"]
        assert one.end == live[-1]
        summary = one.steps[0]["grad_inputs"][0]
        assert summary["device"] == "cpu" and summary["nonfinite"] == 0
        assert one.begin["nodes"][0]["source"]["line"] > 0  # the table's entry, put back


def test_diff_tells_the_same_run_from_a_changed_one(tmp_path: Path) -> None:
    """Ten digits of a float64 statistic: equal runs are identical, a change of one part in a
    million (ten times diff's rtol) still shows."""
    _record(tmp_path / "a.jsonl")
    _record(tmp_path / "b.jsonl")
    _record(tmp_path / "c.jsonl", scale=1 + 1e-6)
    with TraceIndex(tmp_path / "a.jsonl") as a, TraceIndex(tmp_path / "b.jsonl") as b, \
            TraceIndex(tmp_path / "c.jsonl") as c:
        assert diff(a, b, Tolerance())["same"]
        changed = diff(a, c, Tolerance())
        assert not changed["same"] and changed["difference"] is not None


def test_an_old_trace_reads_as_it_did_and_as_its_new_form(tmp_path: Path) -> None:
    """The fixture was written with every key spelled out (schema version 1): it reads as it
    always did, and the same events in the new form read back as the very same events."""
    old = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert old[0]["version"] == 1
    new = tmp_path / "new.jsonl"
    new.write_bytes(b"".join(encode(compact_event(e)) for e in old))
    assert new.stat().st_size < FIXTURE.stat().st_size
    for event in old:
        assert expand(json.loads(encode(compact_event(event)))) == event
    with TraceIndex(FIXTURE, strict=True) as a, TraceIndex(new, strict=True) as b:
        assert a.numbers() == b.numbers()
        for number in a.numbers():
            pa, pb = a.read(number), b.read(number)
            assert (pa.begin, pa.steps, pa.end) == (pb.begin, pb.steps, pb.end)
        assert diff(a, b, Tolerance())["same"]


def test_old_and_new_traces_both_open_in_diff_and_export(tmp_path: Path, capsys) -> None:
    """(``show`` opens both in tests/test_show_snapshots.py and the replay tests.)"""
    from backstep.cli import main

    path = tmp_path / "lstm.jsonl"
    _record(path)
    for trace in (FIXTURE, path):
        assert main(["export", str(trace), "--dot", "-o", str(tmp_path / "out.dot")]) == 0
        assert "->" in (tmp_path / "out.dot").read_text()
        assert main(["diff", str(trace), str(trace)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
