"""Diagnostics: every pitfall script gets exactly the diagnoses its markers expect (kind, node,
line), each cause once; events pass through unchanged; warnings print as before.

A pitfall script marks the line a diagnosis must point at with ``# expect: <kind> <Node|->``
and other lines the diagnosis must name with ``# related: <role>``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from backstep.engine import saved
from backstep.engine.diagnostics import Diagnostician
from backstep.engine.diagnostics.rules import MAX_FREED, EventRules
from backstep.engine.recorder import ListRecorder
from backstep.events.form import expand
from tests.pitfall_runs import PITFALLS, check_script, diagnose
from tests.torch_features import needs_saved_data

SCRIPTS = sorted(PITFALLS.glob("*.py"))
ROOT = Path(__file__).resolve().parent.parent


# an in-place culprit is found through the saved tensor's version, which needs SavedTensor.data
@pytest.mark.parametrize("script", [
    pytest.param(s, marks=needs_saved_data) if "inplace_op" in s.read_text() else s
    for s in SCRIPTS], ids=[s.stem for s in SCRIPTS])
def test_pitfall(script: Path) -> None:
    check_script(script)


def test_messages_name_what_and_where() -> None:
    events = diagnose(PITFALLS / "backward_twice.py")
    (d,) = [e for e in events if e["event"] == "diagnosis"]
    assert "PowBackward0" in d["message"] and "`self`" in d["message"]
    assert "pass 1" in d["message"] and "retain_graph=True" in d["message"]
    if saved.SAVED_DATA:  # the culprit is found through the saved tensor's version
        events = diagnose(PITFALLS / "inplace_saved_input.py")
        (d,) = [e for e in events if e["event"] == "diagnosis"]
        assert "version 0" in d["message"] and "version 1" in d["message"]
        assert "`add_`" in d["message"] and "`a = a.add(1)`" in d["message"]
    events = diagnose(PITFALLS / "retain_graph_loop.py")
    (d,) = [e for e in events if e["event"] == "diagnosis"]
    if saved.SAVED_DATA:  # the bytes held are known
        assert "KiB" in d["message"] or "bytes" in d["message"]


def test_events_pass_through_unchanged_and_diagnoses_follow_their_cause() -> None:
    recorder = ListRecorder()
    doctor = Diagnostician(recorder)
    begin = {"event": "pass_begin", "pass": 1, "parent": None, "api": "backward",
             "retain_graph": False, "caller": None, "roots": [1],
             "nodes": [{"id": 1, "name": "SqrtBackward0", "next": [], "leaf": None,
                        "source": {"file": "t.py", "line": 3, "code": "y = x.sqrt()"}}]}
    finite = {"nonfinite": 0}
    node = {"event": "node", "pass": 1, "step": 1, "id": 1, "name": "SqrtBackward0",
            "grad_outputs": [finite], "grad_inputs": [{"nonfinite": 2}], "saved": [],
            "error": None}
    end = {"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []}
    for event in (begin, node, end, {"event": "exit", "code": 0}):
        doctor.emit(event)
    kinds = [e["event"] for e in recorder.events]
    assert kinds == ["pass_begin", "node", "diagnosis", "pass_end", "exit"]
    assert recorder.events[0] is begin and recorder.events[1] is node
    assert recorder.events[2]["node"] == 1 and recorder.events[2]["source"]["line"] == 3


def test_unknown_nonfinite_counts_and_nonfinite_inputs_are_not_origins() -> None:
    rules = EventRules()
    rules.feed({"event": "pass_begin", "pass": 1, "roots": [1], "nodes": [
        {"id": 1, "name": "SumBackward0"}, {"id": 2, "name": "MulBackward0"}]})
    huge = rules.feed({"event": "node", "pass": 1, "id": 2, "name": "MulBackward0",
                       "grad_outputs": [{"nonfinite": None}], "grad_inputs": [{"nonfinite": 5}],
                       "saved": [], "error": None})
    carried = rules.feed({"event": "node", "pass": 1, "id": 2, "name": "MulBackward0",
                          "grad_outputs": [{"nonfinite": 1}], "grad_inputs": [{"nonfinite": 5}],
                          "saved": [], "error": None})
    assert huge == [] and carried == []
    root = rules.feed({"event": "node", "pass": 1, "id": 1, "name": "SumBackward0",
                       "grad_outputs": [{"nonfinite": 1}], "grad_inputs": [{"nonfinite": 1}],
                       "saved": [], "error": None})
    assert [d["title"] for _, d in root] == ["NaN/Inf gradient passed to backward"]


def test_shared_leaves_do_not_count_as_reusing_a_retained_graph() -> None:
    """A later graph that only shares parameters (AccumulateGrad nodes) with a retained one did
    not go back through it, whatever the released event says."""
    rules = EventRules()
    caller = {"file": "t.py", "line": 9, "code": "loss.backward(retain_graph=True)"}
    for number, first in ((1, 10), (2, 20)):
        rules.feed({"event": "pass_begin", "pass": number, "retain_graph": True, "caller": caller,
                    "roots": [first], "nodes": [{"id": first, "name": "MeanBackward0"},
                                                {"id": 5, "name": "AccumulateGrad"}]})
        rules.feed({"event": "pass_end", "pass": number})
    assert rules.feed({"event": "graph_released", "pass": 1, "reused": True, "bytes": 2048}) == []
    found = rules.finish()  # a call site is judged over all its passes, at the script's end
    assert [d["kind"] for _, d in found] == ["retain_graph_unused"]
    assert "2.0 KiB" in found[0][1]["message"]
    rules.feed({"event": "pass_begin", "pass": 3, "retain_graph": False, "caller": caller,
                "roots": [20], "nodes": [{"id": 20, "name": "MeanBackward0"}]})
    assert rules.feed({"event": "graph_released", "pass": 2, "reused": True, "bytes": 1}) == []


def test_memory_between_passes_is_bounded() -> None:
    rules = EventRules()
    for number in range(1, 4):
        nodes = [{"id": number * 10**6 + k, "name": "MulBackward0"} for k in range(MAX_FREED // 2)]
        rules.feed({"event": "pass_begin", "pass": number, "roots": [], "nodes": nodes})
        for n in nodes:
            rules.feed({"event": "node", "pass": number, "id": n["id"], "name": n["name"],
                        "grad_outputs": None, "grad_inputs": None, "error": None,
                        "saved": [{"name": "self", "status": "alive"}]})
        rules.feed({"event": "pass_end", "pass": number})
    assert len(rules.freed_by) == MAX_FREED and not rules.passes


def test_nonleaf_warning_reaches_the_default_writer_unchanged() -> None:
    """With the default showwarning, the writer gets the very WarningMessage it would have."""
    shown: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
        warnings._showwarnmsg_impl = shown.append  # type: ignore[attr-defined]
        x = torch.ones(2, requires_grad=True)
        y = x * 2

        def read() -> Any:
            return y.grad

        read()
        recorder = ListRecorder()
        with Diagnostician(recorder):
            read()
    assert len(shown) == 2
    plain, under = shown
    assert (str(plain.message), plain.category, plain.filename, plain.lineno, plain.line) == (
        str(under.message), under.category, under.filename, under.lineno, under.line)
    (d,) = recorder.of("diagnosis")
    assert d["kind"] == "grad_none" and "`y`" in d["message"]
    assert d["source"]["file"] == __file__ and "y.grad" in d["source"]["code"]


def test_a_replaced_showwarning_still_gets_every_warning_and_is_restored() -> None:
    calls: list[tuple[Any, ...]] = []

    def mine(*args: Any) -> None:
        calls.append(args)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = mine
        doctor = Diagnostician(ListRecorder())
        doctor.install()
        warnings.warn("plain", UserWarning, stacklevel=1)
        doctor.uninstall()
        assert warnings.showwarning is mine
    assert len(calls) == 1 and str(calls[0][0]) == "plain"


def test_backstep_trace_cli_records_diagnoses(tmp_path: Path) -> None:
    """Through the real CLI, once the session wraps its sink with the Diagnostician."""
    session = (ROOT / "backstep" / "engine" / "session.py").read_text()
    if "Diagnostician" not in session:
        pytest.skip("backstep/engine/session.py does not wire the Diagnostician yet")
    out = tmp_path / "run.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = PITFALLS / "nan_where.py"
    done = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", str(out), str(script)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    import json

    events = [expand(json.loads(line)) for line in out.read_text().splitlines()]
    diags = [e for e in events if e["event"] == "diagnosis"]
    assert [(d["kind"], d["source"]["line"]) for d in diags] == [("nonfinite", 6)]


def test_reentrant_events_do_not_deadlock_and_are_analysed_after() -> None:
    """graph_released comes from a finalizer that may run inside our own emit (a GC during the
    analysis): it must be queued, not block on our lock."""
    events: list[dict[str, Any]] = []
    caller = {"file": "t.py", "line": 4, "code": "loss.backward(retain_graph=True)"}

    class Inner:
        def emit(self, event: dict[str, Any]) -> None:
            events.append(event)
            if event["event"] == "pass_end" and event["pass"] == 2:
                doctor.emit({"event": "graph_released", "pass": 1, "reused": False, "bytes": 8})

        def flush(self) -> None:
            pass

    doctor = Diagnostician(Inner())

    def run() -> None:
        for number in (1, 2):
            doctor.emit({"event": "pass_begin", "pass": number, "retain_graph": number == 1,
                         "caller": caller, "roots": [number], "nodes": [
                             {"id": number, "name": "MeanBackward0"}]})
            doctor.emit({"event": "pass_end", "pass": number})

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "re-entrant emit deadlocked"
    assert [e["event"] for e in events][-2:] == ["pass_end", "graph_released"]
    doctor.emit({"event": "exit", "code": 0, "traceback": None})
    assert [e["event"] for e in events][-2:] == ["diagnosis", "exit"]
    events.pop()
    assert events[-1]["kind"] == "retain_graph_unused"


def test_importing_and_installing_does_not_import_torch() -> None:
    """A session wraps its sink before the script runs; torch must stay unimported until the
    script imports it."""
    code = ("import sys\nfrom backstep.engine.diagnostics import Diagnostician\n"
            "from backstep.engine.recorder import ListRecorder\n"
            "d = Diagnostician(ListRecorder()); d.install(); d.uninstall()\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
