"""The expression console and gradient edits, in the engine: what a line sees at a stop, that
a failing line leaves the pass paused and intact, that statements persist within a stop (and
only there), that ctrl+c interrupts a long line, and that gradients change only when the person
edits them (zeroing a NaN at its birth node gives finite leaf gradients and an ``edit`` event)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from backstep import protocol
from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.recorder import ListRecorder
from backstep.events.spec import check
from tests.engine_fixtures import Console, assert_same, captured, outcome
from tests.scenarios import SCENARIOS

TIMEOUT = 20.0


def test_a_line_sees_the_stops_tensors_node_leaves_and_the_callers_variables() -> None:
    console = Console(lambda e: ["grad_outputs[0].tolist()", "node.name()", "leaves['w'] is w",
                                 "batch_size", "saved['other'].tolist()", "saved['self'] is None", "grad_outputs"]
                      if e["name"] == "MulBackward0" else [])
    batch_size = 4  # a local of the frame that calls backward(), as model/optimizer would be
    with captured(Capture(None, console.controller, record=False)):
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * torch.tensor([3.0, 5.0])).sum().backward()
    assert batch_size == 4
    assert console.answer("grad_outputs[0].tolist()")["text"] == "[1.0, 1.0]"
    assert console.answer("node.name()")["text"] == "'MulBackward0'"
    assert console.answer("leaves['w'] is w")["text"] == "True"
    assert console.answer("batch_size")["text"] == "4"
    assert console.answer("saved['other'].tolist()")["text"] == "[3.0, 5.0]"
    assert console.answer("saved['self'] is None")["text"] == "True"  # never saved: nothing needed it
    shown = console.answer("grad_outputs")["text"]
    assert "tensor([1., 1.])" in shown
    assert all(a["ok"] for _, _, a in console.answers)
    assert torch.equal(w.grad, torch.tensor([3.0, 5.0]))


def test_grad_inputs_once_the_node_ran() -> None:
    console = Console(lambda e: ["grad_inputs[0].tolist()"], resume="continue",
                      breakpoints=[{"kind": "nonfinite"}], stop_at_pass_start=False)
    with captured(Capture(None, console.controller, record=False)):
        x = torch.tensor([-1.0, 4.0], requires_grad=True)
        torch.where(x > 0, x.sqrt(), torch.zeros_like(x)).sum().backward()
    source, stopped, answer = console.answers[0]
    assert stopped["name"] == "SqrtBackward0" and stopped["after"]
    assert answer["ok"] and answer["text"] == "[nan, 0.25]"


def test_an_exception_leaves_the_pass_paused_and_intact() -> None:
    console = Console(lambda e: ["1 / 0", "raise SystemExit(3)", "grad_outputs[0].sum().item()"])
    plain = outcome(SCENARIOS["graph_basics"])
    with captured(Capture(ListRecorder(), console.controller, record=False)):
        under = outcome(SCENARIOS["graph_basics"])
    assert_same(plain, under)
    first = [a for s, _, a in console.answers if s == "1 / 0"][0]
    assert not first["ok"] and "ZeroDivisionError: division by zero" in first["text"]
    assert "Traceback" in first["text"] and "console_eval" not in first["text"]
    assert not console.answer("raise SystemExit(3)")["ok"]
    # each later line was served at the same stop: the pause outlived both exceptions
    stops = [e for e in console.events if e["event"] == "stopped"]
    assert len([a for s, _, a in console.answers if s.startswith("grad")]) == len(stops)
    assert all(a["ok"] for s, _, a in console.answers if s.startswith("grad"))


def test_statements_persist_within_a_stop_and_not_into_the_next() -> None:
    seen: list[int] = []

    def lines(e: dict[str, Any]) -> list[str]:
        seen.append(e["stop"])
        return ["total = grad_outputs[0].sum()", "total * 2", "_ + 1"] if len(seen) == 1 \
            else ["total"]

    console = Console(lines)
    with captured(Capture(None, console.controller, record=False)):
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * 3).sum().backward()
    assert console.answer("total = grad_outputs[0].sum()")["text"] == ""
    assert console.answer("total * 2")["text"].endswith("tensor(2.)")
    assert console.answer("_ + 1")["text"].endswith("tensor(3.)")
    later = console.answer("total")
    assert not later["ok"] and "NameError" in later["text"]


def test_assignments_never_rebind_the_scripts_names() -> None:
    console = Console(lambda e: ["scale = 100", "global marker; marker = 1"])
    scale = 2.0
    with captured(Capture(None, console.controller, record=False)):
        w = torch.tensor([1.0], requires_grad=True)
        (w * scale).sum().backward()
    assert scale == 2.0 and "marker" not in globals()
    assert console.answers and all(a["ok"] for _, _, a in console.answers)


def test_saved_tensors_under_checkpoint_are_never_unpacked() -> None:
    calls = []

    def inner(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return x.sin() * x

    console = Console(lambda e: ["saved"] if e["name"] == "MulBackward0" else [])
    with captured(Capture(None, console.controller, record=False)):
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        checkpoint(inner, x, use_reentrant=False).sum().backward()
    shown = [a for s, _, a in console.answers if s == "saved"]
    assert shown and "unavailable: packed by saved_tensors_hooks" in shown[0]["text"]
    assert len(calls) == 2  # the forward and the one recompute autograd itself asked for


def test_ctrl_c_interrupts_a_long_line_and_the_pause_goes_on() -> None:
    events: list[dict[str, Any]] = []
    stopped = threading.Event()
    answered = threading.Event()

    def emit(event: dict[str, Any]) -> None:
        events.append(event)
        if event["event"] == "stopped":
            stopped.set()
        if event["event"] == "evaluated":
            answered.set()

    controller = Controller(emit, stop_at_pass_start=True)
    result: dict[str, Any] = {}
    with captured(Capture(None, controller, record=False)):
        def work() -> None:
            w = torch.tensor([1.0, 2.0], requires_grad=True)
            (w * 2).sum().backward()
            result["grad"] = w.grad

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        assert stopped.wait(TIMEOUT)
        stop = events[-1]["stop"]
        controller.feed({"cmd": "eval", "req": 1, "source": "while True: pass", "stop": stop})
        for _ in range(200):  # wait until the line is running
            if controller._evaluating:
                break
            threading.Event().wait(0.01)
        controller.feed({"cmd": "cancel"})
        assert answered.wait(TIMEOUT)
        answer = [e for e in events if e["event"] == "evaluated"][0]
        assert not answer["ok"] and "KeyboardInterrupt" in answer["text"]
        answered.clear()
        controller.feed({"cmd": "eval", "req": 2, "source": "grad_outputs[0].sum().item()",
                         "stop": stop})
        assert answered.wait(TIMEOUT)
        assert [e for e in events if e["event"] == "evaluated"][1]["text"] == "1.0"
        controller.feed({"cmd": "detach"})
        worker.join(TIMEOUT)
    assert not worker.is_alive()
    assert torch.equal(result["grad"], torch.full((2,), 2.0))


def test_zeroing_a_nan_at_its_birth_node_gives_finite_leaf_grads_and_an_edit_event() -> None:
    console = Console(lambda e: ["zero_nonfinite()"], resume="continue",
                      breakpoints=[{"kind": "nonfinite"}], stop_at_pass_start=False)
    recorder = ListRecorder()
    with captured(Capture(recorder, console.controller, record=True)):
        x = torch.tensor([-1.0, 4.0], requires_grad=True)
        torch.where(x > 0, x.sqrt(), torch.zeros_like(x)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert x.grad.tolist() == [0.0, 0.25]
    edits = recorder.of("edit")
    assert len(edits) == 1
    edit = edits[0]
    assert edit["name"] == "SqrtBackward0" and edit["slot"] == "grad_inputs"
    assert edit["what"] == "zero_nonfinite()" and edit["indices"] == [0]
    assert edit["before"][0]["nonfinite"] == 1 and edit["after"][0]["nonfinite"] == 0
    assert edit["changed"] == 1  # the one NaN; the 0.25 is the program's own
    assert check(protocol.decode(protocol.encode(edit))) is None
    assert "changed 1 value " in console.answer("zero_nonfinite()")["text"]


@pytest.mark.parametrize("line", ["zero_nonfinite()", "scale(1.0)", "set_grad(0, 1.0)"])
def test_an_edit_that_changes_no_value_is_no_edit(line: str) -> None:
    """Issue 44: zero_nonfinite() on a finite gradient marked the pass "edited by you"."""
    recorder = ListRecorder()
    console = Console(lambda e: [line] if e["name"] == "MulBackward0" else [])
    with captured(Capture(recorder, console.controller, record=True)):
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * torch.tensor([3.0, 5.0])).sum().backward()
    answer = console.answer(line)
    assert answer["ok"] and "no value changed, nothing edited" in answer["text"], answer
    assert recorder.of("edit") == []  # nothing for the UI to mark, nothing in the trace
    assert w.grad.tolist() == [3.0, 5.0]


@pytest.mark.parametrize("line, expected", [
    ("set_grad(0, torch.full_like(grad_outputs[0], 2.0))", [6.0, 10.0]),
    ("scale(0.5)", [1.5, 2.5]),
    ("clip(1.0)", None),
])
def test_edits_before_a_node_replace_its_incoming_gradient(line: str, expected: Any) -> None:
    console = Console(lambda e: [line] if e["name"] == "MulBackward0" else [])
    with captured(Capture(None, console.controller, record=False)):
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * torch.tensor([3.0, 5.0])).sum().backward()
    assert console.answer(line)["ok"], console.answer(line)["text"]
    if expected is None:  # incoming [1, 1] has norm sqrt(2): clipped to norm 1
        assert torch.allclose(w.grad, torch.tensor([3.0, 5.0]) / 2 ** 0.5, atol=1e-5)
    else:
        assert w.grad.tolist() == expected


def test_a_bad_edit_is_refused_in_the_console_and_changes_nothing() -> None:
    console = Console(lambda e: ["set_grad(0, torch.ones(5))", "set_grad(7, 1.0)"])
    with captured(Capture(None, console.controller, record=False)):
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        (w * 3).sum().backward()
    texts = [a["text"] for _, _, a in console.answers]
    assert "not (5,)" in texts[0] and "no [7]" in texts[1]
    assert not any(a["ok"] for _, _, a in console.answers)
    assert torch.equal(w.grad, torch.full((2,), 3.0))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_lines_without_an_edit_change_nothing(name: str) -> None:
    """Reading everything at every stop, without editing, leaves every result bit-identical."""
    fn = SCENARIOS[name]
    plain = outcome(fn)
    console = Console(lambda e: ["grad_outputs", "saved", "leaves", "[g.sum() for g in "
                                 "grad_outputs if g is not None]"])
    with captured(Capture(ListRecorder(), console.controller, record=False)):
        under = outcome(fn)
    assert_same(plain, under)
    assert console.answers


def test_a_ui_that_goes_away_interrupts_a_running_line_and_releases_the_pass() -> None:
    stopped = threading.Event()
    events: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> None:
        events.append(event)
        if event["event"] == "stopped":
            stopped.set()

    controller = Controller(emit, stop_at_pass_start=True)
    done = threading.Event()
    with captured(Capture(None, controller, record=False)):
        def work() -> None:
            w = torch.tensor([1.0], requires_grad=True)
            (w * 2).sum().backward()
            done.set()

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        assert stopped.wait(TIMEOUT)
        controller.feed({"cmd": "eval", "req": 1, "source": "while True: pass"})
        for _ in range(200):
            if controller._evaluating:
                break
            threading.Event().wait(0.01)
        controller.feed({"cmd": "detach"})
        assert done.wait(TIMEOUT), "the pass stayed paused in a console line"
    assert "KeyboardInterrupt" in [e for e in events if e["event"] == "evaluated"][0]["text"]
