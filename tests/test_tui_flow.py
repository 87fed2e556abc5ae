"""The gradient-flow chart (F): leaves in model order, vanishing / exploding / NaN marked, and
it fills in as leaves accumulate."""

from __future__ import annotations

from textual.widgets import Static

from backstep.tui.app import BackstepApp
from backstep.tui.panels.flow import FlowScreen, leaf_flows, verdicts
from backstep.tui.state.flow_leaves import axis_labels
from backstep.tui.state.model import SessionModel
from tests.tui_fixtures import (
    LONG_LEAVES,
    RecordingLink,
    live_app,
    long_name_events,
    summary,
    two_passes_own_ids,
    upto_stop,
)
from tests.tui_pilot import pilot, screen_text


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
    app = live_app(RecordingLink(long_name_events(), stop=4))
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
            app.driver.reader.feed(event)
        await pilot.pause(0.3)
        assert [f.norm for f in screen.flows] == [32.0, 64.0]
        assert "2/2 leaves accumulated" in str(screen.query_one("#flow-verdicts", Static).content)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, FlowScreen)


async def open_chart(app: BackstepApp, pilot) -> FlowScreen:  # type: ignore[no-untyped-def]
    """Press F: the chart's screen."""
    await pilot.press("F")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, FlowScreen)
    return screen


def flow_text(screen: FlowScreen) -> str:
    """The chart's caption (its border's subtitle) and the lines under it."""
    lines = [str(s.content) for s in screen.query(Static) if s.id in ("flow-leaf",
                                                                       "flow-verdicts")]
    return " ".join([str(screen.query_one("#flow-box").border_subtitle), *lines])


@pilot
async def test_F_under_review_charts_the_pass_looked_back_at() -> None:
    app = live_app(RecordingLink(two_passes_own_ids(), stop=8))  # pass 2, before step 3
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("p", "p", "p")  # pass 1, before its last node: x accumulated, not y
        await pilot.pause()
        assert app.review is not None and app.review.number == 1
        screen = await open_chart(app, pilot)
        text = flow_text(screen)
        assert "pass 1 · escape closes" in text and "1/2 leaves accumulated" in text
        assert [f.norm for f in screen.flows] == [None, 64.0]  # model order: y, then x


@pilot
async def test_F_at_a_pass_start_charts_the_finished_pass_before_it() -> None:
    events = two_passes_own_ids()
    app = live_app(RecordingLink(events, stop=6))  # the start of pass 2 (after f)
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        screen = await open_chart(app, pilot)
        text = flow_text(screen)
        assert "pass 1 (finished) — pass 2 starting" in text
        assert "2/2 leaves accumulated" in text and [f.norm for f in screen.flows] == [32.0, 64.0]
        # pass 2 runs on (the chart is modal): once a leaf of it accumulates, it is charted
        for event in events[len(upto_stop(6, events)):len(upto_stop(10, events))]:
            app.driver.reader.feed(event)
        await pilot.pause(0.3)
        text = flow_text(screen)
        assert "pass 2 · escape closes" in text and "1/2 leaves accumulated" in text


@pilot
async def test_the_cursor_walks_the_leaves_with_their_full_names() -> None:
    app = live_app(RecordingLink(long_name_events(), stop=1))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("f")  # the pass ends: both leaves accumulated
        await pilot.pause()
        screen = await open_chart(app, pilot)
        leaf = str(screen.query_one("#flow-leaf", Static).content)
        assert f"leaf 1/2  {LONG_LEAVES['y']}" in leaf and "‖grad‖ 32" in leaf
        await pilot.press("right")
        await pilot.pause()
        leaf = str(screen.query_one("#flow-leaf", Static).content)
        assert f"leaf 2/2  {LONG_LEAVES['x']}" in leaf and "‖grad‖ 64" in leaf
        await pilot.press("right")  # the last leaf: it stays
        await pilot.pause()
        assert screen.cursor == 1
        await pilot.press("home")
        await pilot.pause()
        assert screen.cursor == 0 and isinstance(app.screen, FlowScreen)


def test_axis_labels_drop_the_shared_prefix_and_thin_to_fit() -> None:
    names = [f"model.layers.{i}.{p}" for i in range(14) for p in ("weight", "bias")]
    picked, labels = axis_labels(names, 100)  # 28 leaves in 100 cells: not every one fits
    assert picked[0] == 1 and 1 < picked[1] - picked[0] and len(picked) == len(labels)
    spacing = 100 / len(names) * (picked[1] - picked[0])
    assert all(len(label) < spacing for label in labels)  # labels never run together
    assert labels[0] == "0.weight" and not any(label.startswith("model.") for label in labels)
    picked, labels = axis_labels(names[:4], 100)  # room for all
    assert picked == [1, 2, 3, 4] and labels == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert axis_labels([], 80) == ([], [])
    assert axis_labels(["w"], 80) == ([1], ["w"])


@pilot
async def test_leaf_names_with_markup_are_drawn_as_they_read() -> None:
    hostile = "[bold red]w[/]"
    events = [{**e, "leaf": hostile} if e.get("leaf") == LONG_LEAVES["y"] else e
              for e in long_name_events()]
    for ev in events:
        if ev["event"] == "pass_begin":
            ev["nodes"] = [{**n, "leaf": hostile} if n["leaf"] == LONG_LEAVES["y"] else n
                           for n in ev["nodes"]]
    app = live_app(RecordingLink(events, stop=1))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        await open_chart(app, pilot)
        text = screen_text(app)
        assert f"leaf 1/2  {hostile}" in text
        assert text.count(hostile) == 2  # literally, on the x axis and the cursor's line
