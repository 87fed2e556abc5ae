"""The layout fits the terminal: every size from 80x24 shows the graph, the selected node's
gradients and saved tensors and the status line without scrolling; it re-flows on resize; z
maximises the focused panel; long names are cut keeping their informative tail."""

from __future__ import annotations

import copy

import pytest

from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.modules import ModulePanel
from backstep.tui.text.format import cut_left, cut_middle
from tests.tui_fixtures import (
    LONG_LEAVES,
    RecordingLink,
    gpt_named_events,
    live_app,
    long_name_events,
    no_wider,
    saved,
    upto_stop,
)
from tests.tui_fixtures import (
    long_name_app as make_app,
)
from tests.tui_pilot import line_with, pilot, screen_text, settle

SIZES = [(80, 24), (100, 30), (110, 32), (140, 42), (160, 48), (200, 60)]
ALWAYS = ("#graph", "#gradients", "#saved", "#status")


def test_cut_left_keeps_the_tail() -> None:
    assert cut_left("model.transformer.h.0.ln_2.weight", 16) == "…h.0.ln_2.weight"
    assert cut_left("short", 16) == "short"
    assert len(cut_left("abcdefghijkl", 5)) == 5


def test_cut_middle_keeps_both_ends() -> None:
    cut = cut_middle("model.transformer.h.0.ln_2.weight", 16)
    assert len(cut) == 16 and cut.startswith("model") and cut.endswith("weight") and "…" in cut
    assert cut_middle("short", 16) == "short"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_detail_and_status_fit_without_scrolling(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        screen = app.screen.region
        for selector in ALWAYS:
            widget = app.query_one(selector)
            assert widget.display, selector
            assert screen.contains_region(widget.region), (selector, widget.region, screen)
            assert widget.region.height >= 1 and widget.region.width >= 20, selector
        text = screen_text(app)
        assert "stopped: step before MulBackward0 #3" in line_with(text, "pass 1", "step 3 of 5")
        assert "grad_output[0]" in text and "value 16" in text  # incoming gradient
        assert "other" in text and "alive" in text  # saved tensors and their status
        assert "outgoing" in text and "runs next" in text
        # short of width, the Gradients panel gets more room than Source (from 140 columns on,
        # Source and Leaves keep 56 and the rest is shared; from 170 on they grow too)
        source, gradients = app.query_one("#source").region, app.query_one("#gradients").region
        if size[0] < 140 and source.height and source.y < gradients.bottom:
            assert gradients.width > source.width
        if 140 <= size[0] < 170:
            assert source.width == 56
        if size[0] >= 170:
            assert 56 < source.width <= gradients.width


@pilot
async def test_layout_reflows_when_the_terminal_is_resized() -> None:
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert app.screen.has_class("-wide") and app.screen.has_class("-tall")
        wide = app.query_one("#gradients").region
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert app.screen.has_class("-narrow") and app.screen.has_class("-short")
        narrow = app.query_one("#gradients").region
        assert narrow.width < wide.width
        for selector in ALWAYS:
            assert app.screen.region.contains_region(app.query_one(selector).region), selector
        assert "value 16" in screen_text(app)
        await pilot.resize_terminal(120, 36)
        await settle(pilot)
        assert app.screen.has_class("-medium")
        assert app.query_one("#gradients").region.width > app.query_one("#source").region.width
        assert "value 16" in screen_text(app)


@pilot
async def test_z_maximises_the_focused_panel_and_restores_it() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.query_one(GradientsPanel).focus()
        await pilot.press("z")
        await settle(pilot)
        assert app.screen.maximized is app.query_one(GradientsPanel)
        assert app.query_one(GradientsPanel).region.width == 80
        assert not app.query_one("#graph").region.width  # hidden while maximised
        await pilot.press("z")
        await settle(pilot)
        assert app.screen.maximized is None
        assert app.query_one("#graph").region.width > 20
        app.query_one("#console-log").focus()
        await pilot.press("z")
        await settle(pilot)
        assert app.screen.maximized is app.query_one("#console")  # the panel, not just its log


@pilot
async def test_long_names_are_cut_from_the_left_and_shown_whole_in_the_detail() -> None:
    app = make_app(stop=4)  # AccumulateGrad of model.transformer.h.0.ln_2.weight
    async with app.run_test(size=(110, 32)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "…h.0.ln_2.weight" in text or LONG_LEAVES["x"] in text
        assert "ln_2.weig…" not in text  # never cut at the informative end
        assert "model.transf…" not in text
        detail = app.query_one(GradientsPanel)
        first = detail.get_option_at_index(0).prompt.plain
        assert LONG_LEAVES["x"] in first  # the full name in the detail view
        # little room at 110 columns: the id and the source line go, the module path is cut
        # from the left (never at its tail)
        row = line_with(text, "MulBackward0 …")
        assert row.split("MulBackward0 …")[1].startswith(".mlp.c_proj  ") and "#3" not in row
        await pilot.resize_terminal(200, 48)  # more room, more of the path: re-cut on resize
        await settle(pilot)
        graph = line_with(screen_text(app), "MulBackward0 …")
        assert "….transformer.h.11.mlp.c_proj  " in graph


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (170, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_graph_rows_fit_and_leaves_are_cut_only_from_the_left(size: tuple[int, int]) -> None:
    app = live_app(RecordingLink(gpt_named_events()))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        graph = app.query_one(GraphPanel)
        assert no_wider(graph)  # none cut at the right
        leaves = 0
        for line in graph._tree_lines:
            row = line.node.data
            info = graph._view.graph.nodes.get(row.node) if row is not None else None
            if info is None or not info.leaf or row.kind != "node":
                continue
            shown = line.node.label.plain.split(" ")[2]  # glyph, name, leaf, ...
            assert info.leaf == shown or (shown[0] == "…" and info.leaf.endswith(shown[1:])), shown
            assert shown.endswith("c_fc.weight") or shown == "input", shown
            leaves += 1
        assert leaves >= 5
        # the rows on screen are the labels: no "…" at the right edge of the panel
        region = graph.region
        for text in screen_text(app).splitlines()[region.y + 1 : region.bottom - 1]:
            assert not text[region.x : region.right - 3].rstrip().endswith("…"), text


@pytest.mark.parametrize("size", [(80, 24), (110, 32)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_gradients_fit_the_panel_without_wrapping_or_scrolling(size: tuple[int, int]) -> None:
    app = make_app(stop=5)  # the pass nearly done: AddBackward0 #2 ran, with two outgoing
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        app.query_one(GraphPanel).reveal(2)
        await settle(pilot)
        panel = app.query_one(GradientsPanel)
        assert "AddBackward0 #2" in str(panel.border_title)
        assert panel.max_scroll_y == 0  # incoming and both outgoing summaries, no scrolling
        text = screen_text(app)
        assert "grad_input[0] → MulBackward0 #3" in text
        # the leaf's name cut from the left to keep the target on one line
        target = line_with(text, "grad_input[1] →")
        assert "AccGrad (…" in target and ".weight) #4" in target, target
    app = live_app(RecordingLink(gpt_named_events()))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        # a [2, 2] gradient's summary wraps onto a second line: every number and the dtype
        # stay (it cut to ``[2, 2]  min -1  max 2  norm 2.305`` with rows to spare)
        panel = app.query_one(GradientsPanel)
        prompt = panel.get_option("grad_outputs:0").prompt
        shown = " ".join(line.plain for line in prompt.renderables[1:3])
        for part in ("[2, 2] float32", "min -1", "max 2", "mean 0.4375", "norm 2.305"):
            assert part in shown, shown
        assert panel.max_scroll_y == 0


@pilot
async def test_saved_tensors_keep_their_status_and_cut_names_in_the_middle() -> None:
    events = copy.deepcopy(upto_stop(3, long_name_events()))
    events[-1]["saved"] = [saved("self", [10, 16]), saved("total_weight", []),
                           saved("mat1_sym_sizes_0_really_long", [4096, 50257])]
    app = live_app(RecordingLink(events, stop=3))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "status" in line_with(text, "name", "tensor", "bytes")
        row = line_with(text, "[4096, 50257]")
        name = row.split("[4096")[0].split("│")[-1].strip()  # cut in the middle
        assert name.startswith("mat") and "…" in name and name.endswith("long"), row
        assert "alive" in row and "4 B" in row, row
        assert "total_weight" in text and "alive" in line_with(text, "total_weight")


@pytest.mark.parametrize("size", [(80, 24), (110, 32)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_module_view_rows_fit_the_panel(size: tuple[int, int]) -> None:
    app = live_app(RecordingLink(gpt_named_events()))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("m")
        await settle(pilot)
        panel = app.query_one(ModulePanel)
        panel.focus()
        await pilot.press("home")
        for _ in range(5):  # model › transformer › h.22 › mlp › c_fc, unfolded
            await pilot.press("right", "down")
        await settle(pilot)
        text = screen_text(app)
        assert "AccGrad weight" in text  # five levels deep: the leaf kept whole, the name short
        assert no_wider(panel)  # none cut at the right


@pytest.mark.parametrize("size", [(80, 24), (100, 30)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_a_short_narrow_screen_draws_no_scrollbar_outside_the_panels(
        size: tuple[int, int]) -> None:
    """Issue 44: at 80x24 Source and Leaves are a scroll away, and the scrollbar of the row
    that scrolls them into view sat outside the Gradients panel's border (its thumb drawn
    beside it). The panels take the whole width; focus still scrolls the Leaves into view."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        main = app.query_one("#main")
        assert main.max_scroll_y > 0  # Source and Leaves below, a scroll away
        gradients = app.query_one("#gradients").region
        assert gradients.right == size[0] == app.query_one("#saved").region.right
        for row in screen_text(app).splitlines()[gradients.y:gradients.bottom]:
            assert row[gradients.right - 1] in "╮│╯", row  # the border is the last column
        for _ in range(6):  # tab to the Leaves (docs/run.md)
            await pilot.press("tab")
            if app.focused is app.query_one("#leaves"):
                break
        await settle(pilot)
        assert app.focused is app.query_one("#leaves")
        assert main.scroll_y > 0
        assert app.screen.region.contains_region(app.query_one("#leaves").region)
