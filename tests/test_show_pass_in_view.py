"""``backstep show``: the panels are about the pass in view. A search (/) after stepping back
into an earlier pass selects that pass's node and fills Gradients and Saved tensors, as at a live
stop; F at a pass's start charts the pass that just ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from backstep.traces.index import TraceIndex
from backstep.tui.panels.flow import FlowScreen
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.saved import SavedPanel
from tests.replay_traces import record
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot, screen_text, type_query

SCRIPT = """\
import torch

torch.manual_seed(0)
lin = torch.nn.Linear(3, 3)
x = torch.randn(4, 3)
for _ in range(2):
    torch.tanh(lin(x)).sum().backward()
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("show-pass"), "train", SCRIPT)


@pilot
async def test_search_after_stepping_back_into_the_earlier_pass(trace: Path) -> None:
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            for key in ("]", "p"):  # pass 2's start, then back into pass 1's end
                await pilot.press(key)
                await pilot.pause()
            assert app.snapshot.pass_.number == 1
            await type_query(pilot, "Addmm")
            text = screen_text(app)
            assert "1/1" in text and "no node selected" not in text
            node = app.snapshot.pass_.graph.nodes[app.selected]
            assert node.name == "AddmmBackward0"
            assert f"Gradients · AddmmBackward0 #{app.selected}" in text
            assert app.query_one(GradientsPanel)._focus.record is not None
            assert app.query_one(SavedPanel)._focus.saved


@pilot
async def test_F_at_a_pass_start_charts_the_pass_before_it(trace: Path) -> None:
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(110, 32)) as pilot:
            await pilot.pause()
            await pilot.press("]")  # pass 2's start: no leaf of it accumulated yet
            await pilot.pause()
            await pilot.press("F")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, FlowScreen)
            assert "pass 1 (finished) — pass 2 starting" in str(
                screen.query_one("#flow-box").border_subtitle)
            assert len(screen.flows) == 2 and all(f.norm is not None for f in screen.flows)
            assert app.snapshot.pass_.number == 2  # the cursor stays where it was
