"""The gradient-flow chart (F): leaves in model order, vanishing / exploding / NaN marked, and
it fills in as leaves accumulate."""

from __future__ import annotations

from textual.widgets import Static

from backstep.tui.app import BackstepApp
from backstep.tui.flow import FlowScreen, leaf_flows, verdicts
from backstep.tui.model import SessionModel
from tests.test_tui import pilot
from tests.tui_fixtures import LONG_LEAVES, RecordingLink, long_name_events, summary, upto_stop


def snapshot_of(events):  # type: ignore[no-untyped-def]
    model = SessionModel()
    for event in events:
        model.apply(event)
    return model.snapshot()


def with_grads(x: list[float], y: list[float]) -> list[dict]:
    events = long_name_events()
    for ev in events:
        if ev["event"] == "accumulate":
            ev["after"] = summary(x if ev["leaf"] == LONG_LEAVES["x"] else y)
    return events


def test_leaves_in_model_order_with_norm_and_max() -> None:
    flows = leaf_flows(snapshot_of(with_grads([3.0, -4.0], [1e-9, 0.0])))
    # the graph lists y's AccumulateGrad last: reversed, model order puts it first
    assert [f.name for f in flows] == [LONG_LEAVES["y"], LONG_LEAVES["x"]]
    assert flows[1].norm == 5.0 and flows[1].amax == 4.0 and not flows[1].nonfinite
    text = verdicts(flows, 1e3).plain
    assert "vanishing (<1e-07): …" in text or f"vanishing (<1e-07): {LONG_LEAVES['y']}" in text
    assert "exploding" not in text and "2/2 leaves accumulated" in text


def test_exploding_threshold_is_configurable_and_nan_is_marked() -> None:
    flows = leaf_flows(snapshot_of(with_grads([3000.0, 1.0], [float("nan"), 1.0])))
    assert "exploding (>1000)" in verdicts(flows, 1e3).plain
    assert "exploding" not in verdicts(flows, 1e4).plain
    assert flows[0].nonfinite and "NaN/Inf" in verdicts(flows, 1e3).plain


def test_pending_leaves_are_counted() -> None:
    flows = leaf_flows(snapshot_of(upto_stop(3, long_name_events())))
    assert all(f.norm is None for f in flows)
    assert "0/2 leaves accumulated" in verdicts(flows, 1e3).plain


@pilot
async def test_F_opens_the_chart_and_it_follows_the_pass() -> None:
    app = BackstepApp(RecordingLink(long_name_events(), stop=4))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("F")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FlowScreen)
        assert screen.query_one("#flow-box").border_title == "Gradient flow"
        assert [f.norm for f in screen.flows] == [None, None]
        # the person stepped on elsewhere (the chart is modal): x accumulates, then y
        for event in long_name_events()[len(upto_stop(4, long_name_events())):]:
            app.reader.feed(event)
        await pilot.pause(0.3)
        assert [f.norm for f in screen.flows] == [32.0, 64.0]
        assert "2/2 leaves accumulated" in str(screen.query_one("#flow-verdicts", Static).content)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, FlowScreen)
