"""Step back in a live session: ``p`` reviews earlier nodes of the shown pass from what was
recorded, marked "review"; ``n`` walks forward to the live stop; nothing is sent or re-run."""

from __future__ import annotations

from backstep.tui.app import BackstepApp
from backstep.tui.model import SessionModel
from backstep.tui.review import review_at
from tests.test_tui import SIZE, pilot, screen_text
from tests.tui_fixtures import RecordingLink, example_events, upto_stop


def make_app(stop: int) -> tuple[BackstepApp, RecordingLink]:
    link = RecordingLink(example_events(), stop=stop)
    return BackstepApp(link), link


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
