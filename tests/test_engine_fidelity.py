"""With backstep attached, every scenario computes bit-identical results and raises the same
errors as plain PyTorch — recording a trace, and stepping node by node through the controller."""

from __future__ import annotations

import pytest

from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import AutoStepper, assert_same, captured, check_stream, outcome
from tests.scenarios import SCENARIOS


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_recording_changes_nothing(name: str) -> None:
    fn = SCENARIOS[name]
    plain = outcome(fn)
    recorder = ListRecorder()
    with captured(Capture(recorder)):
        under = outcome(fn)
    assert_same(plain, under)
    check_stream(recorder.events)
    assert recorder.of("pass_begin"), "every scenario runs at least one backward pass"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_stepping_changes_nothing(name: str) -> None:
    fn = SCENARIOS[name]
    plain = outcome(fn)
    stepper = AutoStepper("step")
    recorder = ListRecorder()
    with captured(Capture(recorder, stepper.controller, record=False)):
        under = outcome(fn)
    assert_same(plain, under)
    stops = [e for e in stepper.events if e["event"] == "stopped"]
    assert stops and stops[0]["reason"] == "pass_start"
    check_stream(recorder.events)
