"""The history view (H): every pass in brief, in show (a recorded multi-pass trace) and in a
live session (history events as they arrive): the loss and ‖grad‖ across passes, vanishing /
exploding / NaN passes marked, a cursor over passes, enter opening a pass held in full."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from backstep.engine.history import encode_floats
from backstep.traces.history_file import norm_of, read
from backstep.traces.index import TraceIndex
from backstep.tui.panels.history import HistoryScreen
from backstep.tui.runtime import replay_driver
from backstep.tui.runtime.replay_driver import ReplayDriver
from backstep.tui.state.review import Cursor
from backstep.tui.state.run_history import RunHistory, SeriesValues, spans, thin, verdicts
from tests.replay_traces import record
from tests.tui_fixtures import (
    POW,
    RecordingLink,
    example_events,
    live_app,
    pass_begin,
    replay_app,
)
from tests.tui_pilot import pilot, screen_text, settle

SIZES = [(80, 24), (140, 42)]

# twelve passes of a small model, a NaN fed in at pass 9, one pass in four in full (1, 5, 9)
TWELVE = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
for step in range(1, 13):
    opt.zero_grad()
    inp = x.clone()
    if step == 9:
        inp[0, 0] = float("nan")
    loss = model(inp).pow(2).mean()
    loss.backward()
    if step != 9:
        opt.step()
print("done")
"""


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("history"), "twelve", TWELVE, "--every", "4")


def brief_events(passes: int = 40, nan_at: int | None = 30, names: tuple[str, ...] = (
        "model.0.weight", "model.0.bias", "model.2.weight")) -> list[dict[str, Any]]:
    """A ``leaves`` event and a ``history`` event a pass, as engine/history writes them: the
    norms shrink pass by pass (the last leaf's vanish below 1e-7 from pass 35), and pass
    ``nan_at`` has NaN gradients in its first leaf."""
    events: list[dict[str, Any]] = [{
        "event": "leaves", "first": 0, "names": list(names),
        "modules": [n.rsplit(".", 1)[0] if "." in n else None for n in names]}]
    for n in range(1, passes + 1):
        norms = [2.0 / n, 0.5 / n, 1e-9 if n >= 35 else 0.1 / n][:len(names)]
        maxes = [v / 2 for v in norms]
        event: dict[str, Any] = {"event": "history", "n": n, "loss": 1.0 / n,
                                 "ids": f"0-{len(names) - 1}"}
        if n == nan_at:
            norms[0] = maxes[0] = math.nan
            event["loss"] = "nan"
            event["nonfinite"] = [[0, 7]]
        event["norm"], event["max"] = encode_floats(norms), encode_floats(maxes)
        events.append(event)
    return events


def live_with_history(passes: int = 40, nan_at: int | None = 30, **kwargs: Any) -> Any:
    """A live session at its first stop of pass 1, with ``passes`` passes in brief behind it
    (a long run the person broke into)."""
    events = example_events()
    at = next(i for i, e in enumerate(events) if e["event"] == "stopped")
    events[at:at] = brief_events(passes, nan_at, **kwargs)
    return live_app(RecordingLink(events, stop=1))


def history_text(app: Any) -> str:
    screen = app.screen
    assert isinstance(screen, HistoryScreen)
    return "\n".join(str(screen.query_one(f"#history-{part}", Static).render())
                     for part in ("pass", "verdicts"))


# -- the state, without a screen -----------------------------------------------------------

def test_a_live_history_reads_as_the_history_command_reads_the_file(twelve: Path) -> None:
    with open(twelve, "rb") as f:
        whole = read(f, str(twelve))
    live = RunHistory()
    for line in twelve.read_bytes().splitlines():
        if line.startswith(b'{"event":"history"') or line.startswith(b'{"event":"leaves"'):
            live.add(json.loads(line))  # as the live reader hands them over
    table = live.table()
    assert [r.n for r in table.rows] == [r.n for r in whole.rows] == list(range(1, 13))
    assert list(table.names) == whole.names
    every = SeriesValues(table.series()[0]).update(table.rows)
    for mine, theirs in zip(table.rows, whole.rows, strict=True):
        assert mine.loss == theirs.loss or (math.isnan(mine.loss) and math.isnan(theirs.loss))
        assert mine.norms.tobytes() == theirs.norms.tobytes()
    assert verdicts(every, 1e3).nonfinite == [9]


def test_the_index_finds_the_brief_lines(twelve: Path) -> None:
    index = TraceIndex(twelve)
    try:
        lines = index.brief_lines()
        assert sum(b'"history"' in line[:24] for line in lines) == 12
        assert sum(b'"leaves"' in line[:24] for line in lines) == 1
        assert index.brief_lines(len(lines)) == []
        assert sorted(index.passes) == [1, 5, 9]
    finally:
        index.close()


def test_show_reads_a_gzip_traces_history_too_a_slice_a_look(
        twelve: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packed = tmp_path / "twelve.jsonl.gz"
    packed.write_bytes(gzip.compress(twelve.read_bytes()))
    index = TraceIndex(packed)
    monkeypatch.setattr(replay_driver, "BRIEF_SLICE", 5)  # the leaves line and four passes
    try:
        driver = ReplayDriver(index)
        assert [r.n for r in driver.run_history().rows] == [1, 2, 3, 4]
        for _ in range(3):
            table = driver.run_history()
        assert [r.n for r in table.rows] == list(range(1, 13)) and table.full == {1, 5, 9}
    finally:
        index.close()


def test_series_are_every_leaf_then_modules_then_leaves() -> None:
    history = RunHistory()
    for event in brief_events(5, None):
        history.add(event)
    table = history.table()
    titles = [c.title for c in table.series()]
    assert titles == ["all", "model.0", "model.2", "model.0.weight", "model.0.bias",
                      "model.2.weight"]
    row = table.rows[0]
    assert norm_of(row, table.series()[1]) == pytest.approx(math.hypot(2.0, 0.5))


def test_thinning_keeps_each_bins_least_and_greatest() -> None:
    history = RunHistory()
    events = brief_events(1000, 500)
    events[700]["norm"] = encode_floats([1e9, 0.5, 0.1])  # one spike in 1000 passes
    for event in events:
        history.add(event)
    table = history.table()
    every = SeriesValues(table.series()[0]).update(table.rows)
    line = thin(every.ns, every.values, 50)
    assert len(line.xs) <= 100 and max(line.ys) > 1e8  # the spike survives thinning
    assert line.bad == [500]


def test_a_series_grows_with_the_passes_and_starts_again_when_they_differ() -> None:
    history = RunHistory()
    events = brief_events(10, 4)
    for event in events[:6]:
        history.add(event)
    series = SeriesValues(history.table().series()[0]).update(history.table().rows)
    assert series.ns == [1, 2, 3, 4, 5] and series.bad == [False, False, False, True, False]
    for event in events[6:]:
        history.add(event)
    series.update(history.table().rows)
    assert series.ns == list(range(1, 11))
    assert series.values[9] == pytest.approx(math.hypot(0.2, 0.05, 0.01))
    other = RunHistory()
    for event in brief_events(3, None):
        other.add(event)
    assert series.update(other.table().rows).ns == [1, 2, 3]
    assert spans([3, 4, 5, 9, 11, 12]) == "3-5, 9, 11-12"
    assert spans([1, 3, 5, 7]) == "1, 3, 5, +1 more"


def test_a_malformed_brief_event_is_skipped() -> None:
    history = RunHistory()
    reader_events = [{"event": "history", "n": 1, "ids": "0-2", "norm": "not base64!"},
                     {"event": "history", "n": "x"}, {"event": "leaves", "first": -3,
                                                      "names": ["a"]},
                     {"event": "trip", "n": None}]
    for event in reader_events + brief_events(3, None):
        history.add(event)
    assert [r.n for r in history.table().rows] == [1, 2, 3]


# -- in show -----------------------------------------------------------------------------------

@pilot
async def test_show_charts_every_pass_and_opens_one_held_in_full(twelve: Path) -> None:
    index = TraceIndex(twelve)
    app = replay_app(index)
    async with app.run_test(size=(140, 42)) as p:
        await settle(p)
        await p.press("H")
        await settle(p)
        assert isinstance(app.screen, HistoryScreen)
        text = history_text(app)
        assert "pass 12" in text and "(12/12)" in text and "held in brief only" in text
        assert "NaN/Inf: pass 9 (1 pass)" in text and "12 passes, 3 held in full" in text
        shown = screen_text(app)
        assert "History · 12 passes" in shown and "‖grad‖ per pass (log scale)" in shown
        assert "✗" in shown  # the NaN pass marked on the chart
        await p.press("home")
        await p.pause()
        assert "pass 1 " in history_text(app) and "held in full: enter opens it" in \
            history_text(app)
        for _ in range(8):
            await p.press("right")
        await p.pause()
        text = history_text(app)
        assert "pass 9 " in text and "NaN/Inf" in text and "model.2.weight" in text
        assert "loss nan" in text
        await p.press("left")
        await p.press("enter")  # pass 8: in brief only; the view stays
        await p.pause()
        assert isinstance(app.screen, HistoryScreen)
        await p.press("right", "enter")  # pass 9: held in full; show goes there
        await settle(p)
        assert not isinstance(app.screen, HistoryScreen)
        assert app.snapshot.pass_ is not None and app.snapshot.pass_.number == 9
    index.close()


@pilot
async def test_show_up_and_down_choose_a_module_or_a_leaf(twelve: Path) -> None:
    index = TraceIndex(twelve)
    app = replay_app(index)
    async with app.run_test(size=(140, 42)) as p:
        await settle(p)
        await p.press("H")
        await settle(p)
        assert "‖grad‖ of every leaf (1/7)" in screen_text(app)
        await p.press("down")
        await p.pause()
        assert "‖grad‖ of model.2 (2/7)" in screen_text(app)
        await p.press("up", "up")
        await p.pause()
        assert "(7/7)" in screen_text(app)  # wraps round to the last leaf
        await p.press("escape")
        await p.pause()
        assert not isinstance(app.screen, HistoryScreen)
    index.close()


# -- live ------------------------------------------------------------------------------------

@pilot
async def test_live_history_grows_as_passes_end() -> None:
    events = example_events()
    app = live_app(RecordingLink(events, stop=1))
    async with app.run_test(size=(140, 42)) as p:
        await settle(p)
        await p.press("H")
        await settle(p)
        assert "no pass in brief yet" in history_text(app)
        for event in brief_events(3, None):
            app.driver.reader.feed(event)
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        screen.refresh_table()  # what its timer does every half second
        await p.pause()
        text = history_text(app)
        assert "pass 3" in text and "(3/3)" in text and "3 passes, 1 held in full" in text
        for event in brief_events(5, None)[4:]:
            app.driver.reader.feed(event)
        screen.refresh_table()
        await p.pause()
        assert "pass 5" in history_text(app)  # the cursor follows the newest pass


@pilot
async def test_live_nan_pass_is_marked_and_the_vanishing_ones_named() -> None:
    app = live_with_history()
    async with app.run_test(size=(140, 42)) as p:
        await settle(p)
        await p.press("H")
        await settle(p)
        text = history_text(app)
        assert "NaN/Inf: pass 30 (1 pass)" in text
        await p.press("home")
        for _ in range(29):
            await p.press("right")
        await p.pause()
        text = history_text(app)
        assert "pass 30 " in text and "7 in model.0.weight" in text and "loss nan" in text
        assert "held in brief only" in text
        await p.press("up")  # round to the last leaf's own series: vanishing from pass 35
        await p.pause()
        text = history_text(app)
        assert "vanishing (<1e-07): pass 35-40 (6 passes)" in text and "NaN" not in text
        assert "‖grad‖ of model.2.weight (6/6)" in screen_text(app)


@pilot
async def test_live_enter_reviews_a_pass_held_in_full_and_says_when_one_is_not() -> None:
    events = example_events()[:-1]  # pass 1 stepped node by node, then...
    brief = brief_events(2, None)
    events += brief[:2]  # ...its brief at its end; pass 2 ran unrecorded (c), in brief only
    events += [brief[2], pass_begin(3)]
    events.append({"event": "stopped", "pass": 3, "step": 1, "id": POW, "name": "PowBackward0",
                   "reason": "pass_start", "detail": None, "grad_outputs": [], "saved": []})
    stops = sum(e["event"] == "stopped" for e in events)
    app = live_app(RecordingLink(events, stop=stops))
    async with app.run_test(size=(140, 42)) as p:
        await settle(p)
        assert app.snapshot.stop is not None and app.snapshot.stop.pass_ == 3
        await p.press("H")
        await settle(p)
        text = history_text(app)
        assert "pass 2 " in text and "held in brief only" in text
        assert "2 passes, 1 held in full" in text
        await p.press("enter")  # pass 2: its nodes were never recorded
        await p.pause()
        assert isinstance(app.screen, HistoryScreen) and app.review is None
        await p.press("left", "enter")  # pass 1: reviewed from its start
        await settle(p)
        assert not isinstance(app.screen, HistoryScreen)
        assert app.review == Cursor(1, 0) and app.shown.pass_.number == 1


@pilot
async def test_hostile_leaf_names_are_shown_not_obeyed() -> None:
    app = live_with_history(5, 3, names=("[bold red]x[/]", "a\x1b[31mb", "c"))
    async with app.run_test(size=(140, 42)) as p:
        await settle(p)
        await p.press("H")
        await settle(p)
        await p.press("home", "right", "right")
        await p.pause()
        text = history_text(app)
        assert "[bold red]x[/]" in text and "\x1b" not in screen_text(app)
        await p.press("down")
        await p.pause()
        assert "[bold red]x[/]" in screen_text(app)


# -- snapshots ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES, ids=["80x24", "140x42"])
def test_history_snapshot(snap_compare: Any, size: tuple[int, int]) -> None:
    async def at_the_nan(p: Any) -> None:
        await p.press("H")
        await p.pause()
        await p.press("home")
        for _ in range(29):
            await p.press("right")
        await p.pause()

    assert snap_compare(live_with_history(), terminal_size=size, run_before=at_the_nan)
