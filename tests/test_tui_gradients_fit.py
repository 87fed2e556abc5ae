"""The Gradients panel uses its rows: a summary wraps onto a second line before any number is
dropped, and the dtype (what tells gradients apart under bf16 autocast) is the last field to go
when the panel is short of rows (issue 30: ``[4, 2]  min -0.1336  norm 0.25`` with ten rows
empty)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.text.format import summary_line, summary_lines
from tests.tui_fixtures import RecordingLink, example_events, live_app, summary, upto_stop
from tests.tui_pilot import pilot, settle

SIZES = [(80, 24), (110, 32), (140, 42), (160, 48)]
GRAD = [-0.1336, 0.05, 0.12, -0.1, 0.02, 0.1, 0.03, -0.02]


def bf16(values: list[float], shape: list[int]) -> dict[str, Any]:
    return dict(summary(values, shape), dtype="bfloat16")


def test_a_summary_wraps_before_it_drops_a_field() -> None:
    full = summary_lines(bf16(GRAD, [4, 2]), 80)
    assert len(full) == 1
    wrapped = summary_lines(bf16(GRAD, [4, 2]), 40)
    assert [line.plain for line in wrapped] == ["[4, 2] bfloat16 cpu  min -0.1336",
                                                "max 0.12  mean 0.0083  norm 0.2376"]
    one = summary_line(bf16(GRAD, [4, 2]), 41).plain  # one line: the dtype outlasts min, max
    assert one == "[4, 2] bfloat16  min -0.1336  norm 0.2376", one
    assert summary_line(bf16(GRAD, [4, 2]), 12).plain == "[4, 2]  norm 0.2376"  # never the norm


def events_with(grads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = copy.deepcopy(upto_stop(1, example_events()))
    events[-1]["grad_outputs"] = grads
    return events


def shown(panel: GradientsPanel, option: str) -> str:
    prompt = panel.get_option(option).prompt
    return "\n".join(line.plain for line in getattr(prompt, "renderables", [prompt]))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_one_gradient_shows_every_number_and_its_dtype(size: tuple[int, int]) -> None:
    app = live_app(RecordingLink(events_with([bf16(GRAD, [4, 2])])))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        panel = app.query_one(GradientsPanel)
        text = shown(panel, "grad_outputs:0")
        for part in ("[4, 2] bfloat16", "min -0.1336", "max 0.12", "mean 0.0083",
                     "norm 0.2376", "= -0.1336, 0.05"):
            assert part in text, text
        summary = text.splitlines()[1:3]  # the title, then the summary's two lines
        assert all(len(line) <= panel.content_region.width for line in summary), summary
        assert panel.max_scroll_y == 0


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_a_crowded_node_keeps_every_dtype_and_norm_without_scrolling(
        size: tuple[int, int]) -> None:
    grads = [bf16([g * (i + 1) for g in GRAD], [4, 2]) for i in range(3)]
    app = live_app(RecordingLink(events_with(grads)))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        panel = app.query_one(GradientsPanel)
        for i in range(3):
            text = shown(panel, f"grad_outputs:{i}")
            assert "bfloat16" in text and "norm " in text, (size, text)
        assert panel.max_scroll_y == 0
