"""Replay shows, at every step and in either direction, what a live session showed there.

The live side is the real engine stepping every node (the AutoStepper answers each stop with
``step``) with its stream folded into the UI's SessionModel; the replay side reads the trace of
that same run. The two are compared as the panels see them, at every stop, forward and back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from backstep.traces.index import TraceIndex
from backstep.traces.passes import KIND_CODE
from backstep.tui.state.model import SessionModel
from backstep.tui.state.replay import Position, Replay
from backstep.tui.state.snapshot import Snapshot
from tests.engine_fixtures import AutoStepper, captured
from tests.tui_fixtures import panels


def workload() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(4, 3)
    for _ in range(2):  # two passes accumulating into the same leaves
        y = torch.tanh(lin(x)).sum()
        y.backward(retain_graph=False)
    a = torch.tensor([1.0, -1.0], requires_grad=True)
    torch.sqrt(a).sum().backward()  # a NaN gradient


def live_run(tmp_path: Path) -> tuple[list[Snapshot], Path]:
    """The snapshots a person stepping every node saw, and the trace of that run."""
    stepper = AutoStepper("step")
    recorder = ListRecorder()
    recorder.events = stepper.events  # one stream, in the order the UI would read it
    session = {"event": "session", "version": 1, "torch": torch.__version__, "argv": ["x"]}
    with captured(Capture(recorder, stepper.controller, record=True)):
        workload()
    model = SessionModel()
    model.apply(session)
    seen = []
    for event in stepper.events:
        model.apply(event)
        if event["event"] == "stopped" or event["event"] == "pass_end":
            seen.append(model.snapshot())
    trace = tmp_path / "run.jsonl"
    lines = [session, *(e for e in stepper.events if e["event"] != "stopped")]
    trace.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return seen, trace


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Snapshot], Path]:
    return live_run(tmp_path_factory.mktemp("replay"))


def test_every_step_forward_then_back_is_what_live_showed(run) -> None:
    seen, trace = run
    assert len(seen) > 10
    with TraceIndex(trace) as index:
        replay = Replay(index)
        shown = [panels(replay.snapshot())]
        while replay.step(1):
            shown.append(panels(replay.snapshot()))
        assert shown == [panels(s) for s in seen]
        back = [panels(replay.snapshot())]
        while replay.step(-1):
            back.append(panels(replay.snapshot()))
        assert back[::-1] == shown


def test_jumping_straight_to_a_step_of_a_later_pass_carries_the_leaves(run) -> None:
    seen, trace = run
    with TraceIndex(trace) as index:
        replay = Replay(index)
        assert replay.jump(2, 3)
        live = [s for s in seen if s.pass_.number == 2 and s.stop is not None and
                s.stop.step == 3]
        assert panels(replay.snapshot()) == panels(live[0])
        # the leaves carry their .grad from pass 1: the second accumulation counts 2 passes
        assert replay.jump(2)
        while replay.step(1) and replay.position.number == 2:
            pass
        replay.step(-1)
        counts = {a.leaf: a.passes_since_zeroed for a in replay.snapshot().pass_.accumulations()}
        assert counts == {"lin.bias": 2, "lin.weight": 2}


def test_continue_stops_where_the_engine_would(run) -> None:
    _, trace = run
    with TraceIndex(trace) as index:
        replay = Replay(index)
        assert replay.find([{"kind": "node", "pattern": "AddmmBackward*"}], 1)
        snap = replay.snapshot()
        assert (snap.stop.pass_, snap.stop.name, snap.stop.reason) == \
            (1, "AddmmBackward0", "breakpoint")
        assert replay.find([{"kind": "node", "pattern": "AddmmBackward*"}], 1, False)
        assert replay.snapshot().stop.pass_ == 2
        assert replay.find([], 1)  # the start of the next pass
        assert replay.position == Position(3, 0)
        assert replay.find([{"kind": "nonfinite"}], 1)
        stop = replay.snapshot().stop
        assert stop.after and stop.reason == "nonfinite" and stop.name == "SqrtBackward0"
        assert "NaN/Inf" in stop.detail
        assert not replay.find([{"kind": "nonfinite"}], 1)
        assert replay.find([{"kind": "leaf", "name": "lin.bias"}], -1, False)
        assert replay.snapshot().stop.pass_ == 2
        assert replay.snapshot().stop.detail == "leaf lin.bias"
        assert replay.find([{"kind": "norm", "above": 1e9}, {"kind": "module", "pattern": "x"}],
                           -1)  # back to the start of pass 2
        assert replay.position == Position(2, 0)


def test_moves_past_a_partial_index_index_the_rest(run) -> None:
    _, trace = run
    for move in (lambda r: r.pass_(1), lambda r: r.jump(3), lambda r: r.find([], 1)):
        with TraceIndex(trace, partial=True) as index:
            replay = Replay(index)
            assert replay.numbers == [1]
            assert move(replay) and replay.position.number > 1
    with TraceIndex(trace, partial=True) as index:
        replay = Replay(index)
        for _ in range(6):
            assert replay.step(1)
        assert replay.step(1) and replay.position == Position(2, 0)


@pytest.mark.parametrize("options", [(), ("--no-source",)])
def test_traces_of_every_kind_replay_end_to_end(tmp_path: Path, options: tuple[str, ...]) -> None:
    """Retained graphs, a nested pass, two threads' interleaved passes, with and without
    source: every position of every pass replays, forward and back."""
    from tests.replay_traces import EVERYTHING, record

    trace = record(tmp_path, "everything", EVERYTHING, *options)
    with TraceIndex(trace) as index:
        replay = Replay(index)
        expected = sum(index.passes[n].steps + 1 for n in index.numbers())
        seen = [replay.snapshot()]
        while replay.step(1):
            seen.append(replay.snapshot())
        assert len(seen) == expected
        assert any(s.pass_.parent is not None for s in seen)  # the nested pass
        ends = [s for s in seen if s.stop is None]
        assert len(ends) == len(index.numbers()) and all(s.pass_.ended for s in ends)
        while replay.step(-1):
            pass
        assert replay.position == Position(index.numbers()[0], 0)


def test_a_pass_is_parsed_only_as_far_as_the_cursor_went(run) -> None:
    _, trace = run
    with TraceIndex(trace) as index:
        parsed: list[int] = []
        real = index.event_at

        def counting(start: int, end: int) -> dict[str, Any] | None:
            parsed.append(start)
            return real(start, end)

        index.event_at = counting  # type: ignore[method-assign]
        replay = Replay(index)
        replay.snapshot()
        first = index.pass_lines(index.numbers()[0])
        node = list(first.kinds).index(KIND_CODE["node"])  # after pass_begin and memory
        assert parsed == list(first.starts[:node + 1])  # up to its first node, no more
        replay.step(1)
        replay.snapshot()
        assert parsed == list(first.starts[:node + 2])
        assert len(first.starts) > 6  # the rest of the pass was never read
