"""Step back in a live session: ``p`` reviews earlier nodes of the shown pass from what was
recorded, marked "review"; ``n`` walks forward to the live stop; nothing is sent or re-run."""

from __future__ import annotations

from backstep.tui.app import BackstepApp
from backstep.tui.state.model import SessionModel
from backstep.tui.state.review import review_at
from tests.tui_fixtures import RecordingLink, example_events, live_app, upto_stop
from tests.tui_pilot import SIZE, pilot, screen_text


def make_app(stop: int) -> tuple[BackstepApp, RecordingLink]:
    link = RecordingLink(example_events(), stop=stop)
    return live_app(link), link


def live_snapshots() -> list:
    """The snapshot a live session showed at each stop of the example."""
    shots = []
    for n in range(1, 6):
        model = SessionModel()
        for event in upto_stop(n):
            model.apply(event)
        shots.append(model.snapshot())
    return shots


def test_review_at_is_the_earlier_live_state() -> None:
    shots = live_snapshots()
    latest = shots[-1]
    for k, then in enumerate(shots[:-1]):
        past = review_at(latest, k)
        assert past is not None
        view, old = past.pass_, then.pass_
        assert view.executed() == old.executed()
        assert [view.record(i) for i in view.executed()] == [old.record(i) for i in old.executed()]
        assert view.accumulations() == old.accumulations()
        assert {i: view.state(i, past.current) for i in view.graph.nodes} == \
            {i: old.state(i, then.current) for i in old.graph.nodes}
        assert (past.stop.id, past.stop.step, past.stop.grad_outputs, past.stop.saved) == \
            (then.stop.id, then.stop.step, then.stop.grad_outputs, then.stop.saved)
    assert review_at(latest, len(latest.pass_.executed())) is None


@pilot
async def test_p_reviews_back_and_n_returns_to_the_live_stop() -> None:
    app, link = make_app(stop=4)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "step 4 of 5" in screen_text(app)
        await pilot.press("p")
        await pilot.pause()
        text = screen_text(app)
        assert " review " in text and "review (recorded) before MulBackward0 #3" in text
        assert "step 3 of 5" in text and "➜ MulBackward0" in text
        await pilot.press("p", "p")
        await pilot.pause()
        assert "before PowBackward0 #1" in screen_text(app)
        await pilot.press("p")
        await pilot.pause()
        assert "before PowBackward0 #1" in screen_text(app)  # the start of the pass
        await pilot.press("n", "n", "n")
        await pilot.pause()
        text = screen_text(app)
        assert " review " not in text and "step 4 of 5" in text
        assert link.sent == []  # reviewing never talks to the debuggee
        await pilot.press("n")
        await pilot.pause()
        assert link.sent == [{"cmd": "step"}]


def two_passes() -> list[dict]:
    """The example run twice: pass 1 ends, pass 2 stops at each node."""
    first = [e for e in example_events() if e["event"] != "exit"]
    second = [{**e, "pass": 2} if "pass" in e else e
              for e in example_events() if e["event"] not in ("session",)]
    return first + second


@pilot
async def test_p_steps_back_into_the_ended_pass_and_n_returns() -> None:
    link = RecordingLink(two_passes(), stop=7)  # pass 2, before its second node
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert " pass 2 " in text and "step 2 of 5" in text
        await pilot.press("p", "p")
        await pilot.pause()
        text = screen_text(app)
        assert " review " in text and " pass 1 " in text and "step 5 of 5" in text
        assert "before AccumulateGrad #" in text
        await pilot.press("p", "p", "p", "p")
        await pilot.pause()
        assert "step 1 of 5" in screen_text(app) and " pass 1 " in screen_text(app)
        await pilot.press("p")  # nothing before pass 1: stays
        await pilot.pause()
        assert "step 1 of 5" in screen_text(app)
        await pilot.press("right_square_bracket")  # ] the start of the next pass
        await pilot.pause()
        text = screen_text(app)
        assert " pass 2 " in text and "step 1 of 5" in text and " review " in text
        await pilot.press("left_square_bracket", "left_square_bracket")  # [ pass 1's start
        await pilot.pause()
        assert " pass 1 " in screen_text(app)
        await pilot.press(*["n"] * 6)  # pass 1's five nodes, pass 2's first: the live stop
        await pilot.pause()
        text = screen_text(app)
        assert " review " not in text and " pass 2 " in text and "step 2 of 5" in text
        assert link.sent == []


@pilot
async def test_review_says_when_older_passes_were_dropped_at_the_cap() -> None:
    events = two_passes()
    third = [{**e, "pass": 3} for e in events if e.get("pass") == 2]
    link = RecordingLink([*events, *third], stop=11)  # pass 3, its first node
    app = live_app(link)
    app.driver.reader.model.review_cap = 8  # one ended pass (5 nodes + 2 accumulations) fits
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.driver.reader.model.dropped == 1 and [v.number for v in app.driver.history()] == [2]
        await pilot.press("left_square_bracket")
        await pilot.pause()
        text = screen_text(app)
        assert " pass 2 " in text and "oldest kept pass: 1 earlier dropped" in text
        await pilot.press("p")
        await pilot.pause()
        assert " pass 2 " in screen_text(app) and "step 1 of 5" in screen_text(app)


def test_the_model_keeps_ended_passes_up_to_the_cap() -> None:
    model = SessionModel()
    model.review_cap = 8
    for event in two_passes():
        model.apply(event)
    assert [v.number for v in model.ended] == [2] and model.dropped == 1
    assert [len(v.executed()) for v in model.ended] == [5]
