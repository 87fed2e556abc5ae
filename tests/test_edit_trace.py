"""A gradient edit in a recorded trace: the ``edit`` event is written and indexed, ``show`` marks
the pass "edited by you", and ``diff`` says which side was edited, where and how."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from backstep.cli import main
from backstep.engine.capture import Capture
from backstep.engine.recorder import JsonlRecorder
from backstep.engine.session import session_event
from backstep.traces.edits import edits_of
from backstep.traces.index import TraceIndex
from backstep.tui.app import BackstepApp
from backstep.tui.panels.console import ConsolePanel
from tests.engine_fixtures import Console, captured
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot


def record(path: Path, lines: list[str]) -> torch.Tensor:
    """A NaN born in SqrtBackward0, stopped at by a non-finite breakpoint, ``lines`` typed."""
    console = Console(lambda e: lines, resume="continue", breakpoints=[{"kind": "nonfinite"}],
                      stop_at_pass_start=False)
    with path.open("wb") as stream:
        recorder = JsonlRecorder(stream)
        recorder.emit(session_event(["edited.py"]))
        with captured(Capture(recorder, console.controller, record=True)):
            x = torch.tensor([-1.0, 4.0], requires_grad=True)
            torch.where(x > 0, x.sqrt(), torch.zeros_like(x)).sum().backward()
        recorder.close()
    return x.grad


@pytest.fixture
def traces(tmp_path: Path) -> tuple[Path, Path]:
    plain, edited = tmp_path / "plain.jsonl", tmp_path / "edited.jsonl"
    assert torch.isnan(record(plain, [])).any()
    assert record(edited, ["zero_nonfinite()"]).tolist() == [0.0, 0.25]
    return plain, edited


def test_the_trace_records_and_indexes_the_edit(traces: tuple[Path, Path]) -> None:
    plain, edited = traces
    with TraceIndex(plain) as index:
        assert index.passes[1].edits == 0 and edits_of(index) == []
    with TraceIndex(edited, strict=True) as index:
        assert index.passes[1].edits == 1
        (edit,) = edits_of(index)
        assert edit["name"] == "SqrtBackward0" and edit["what"] == "zero_nonfinite()"
        assert edit["before"][0]["nonfinite"] == 1 and edit["after"][0]["nonfinite"] == 0


def test_diff_says_which_side_was_edited(traces: tuple[Path, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    plain, edited = traces
    main(["diff", str(plain), str(edited)])
    out = capsys.readouterr().out
    assert "note: B was edited by you at pass 1 step" in out
    assert "SqrtBackward0" in out and "zero_nonfinite() on grad_inputs" in out
    assert "A was edited" not in out
    # the difference is born downstream of the edit, and the edit is named as its cause
    assert "so       B's gradients were edited by you at pass 1 step" in out
    assert "the difference comes from that edit, not from the program" in out


@pilot
async def test_show_marks_the_pass_edited_from_the_edit_on(traces: tuple[Path, Path]) -> None:
    _, edited = traces
    with TraceIndex(edited) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            seen = []
            for _ in range(8):
                seen.append("edited by you" in app.driver.status_line(140).plain)
                await pilot.press("n")
                await pilot.pause()
            assert not seen[0] and seen[-1]


async def send(app: BackstepApp, pilot: Any, source: str, until: Any) -> None:
    """Type ``source`` in show's console line and wait (a worker thread runs it) for ``until``."""
    line = app.query_one(ConsolePanel).expression_line
    if not line.display:
        await pilot.press("colon")
        assert line.has_focus
    line.value = source
    await pilot.press("enter")
    for _ in range(200):
        await pilot.pause(0.02)
        if until():
            return


def console_text(app: BackstepApp) -> str:
    return "\n".join(app.query_one(ConsolePanel).log_view.lines)


@pilot
async def test_show_console_evaluates_over_what_the_trace_recorded(
        traces: tuple[Path, Path]) -> None:
    with TraceIndex(traces[1]) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            for source in ("grad_outputs[0]['values']", "s = node['name']", "s + '!'",
                           "type(grad_outputs[0]).__name__"):
                await send(app, pilot, source, lambda: not app.evaluating)
            text = console_text(app)
            assert "tensors are not in the trace" in text
            assert "[1.0]" in text  # the root's incoming gradient, as recorded
            assert "'SumBackward0!'" in text
            assert "'dict'" in text  # plain data, not a tensor


def _running(app: BackstepApp) -> bool:
    console = getattr(app, "trace_console", None)
    return console is not None and console.evaluator is not None and \
        console.evaluator._thread is not None


@pilot
async def test_ctrl_c_interrupts_a_show_console_line_and_show_goes_on(
        traces: tuple[Path, Path]) -> None:
    with TraceIndex(traces[1]) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await send(app, pilot, "while True: pass", lambda: _running(app))
            await pilot.press("ctrl+c")
            for _ in range(200):
                await pilot.pause(0.02)
                if not app.evaluating:
                    break
            assert app.is_running  # ctrl+c interrupted the line; it did not quit show
            assert "KeyboardInterrupt" in console_text(app)


@pilot
async def test_show_console_offers_no_edit_and_refuses_one_in_words(
        traces: tuple[Path, Path]) -> None:
    """Issue 44: show's console line advertised zero_nonfinite() clip(n) scale(k) set_grad(i, t),
    which a recording cannot apply."""
    with TraceIndex(traces[1]) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await pilot.press("colon")
            await pilot.pause()
            line = app.query_one(ConsolePanel).expression_line
            assert line.display and "no edits" in line.placeholder
            assert not any(name in line.placeholder for name in ("zero_nonfinite", "set_grad",
                                                                  "scale(", "clip("))
            await send(app, pilot, "zero_nonfinite()", lambda: not app.evaluating)
            text = console_text(app)
            assert "gradient edits need a live session" in text, text
            assert "edited by you" not in app.driver.status_line(140).plain
