"""Search (/): by node name, module path or leaf name; enter selects, n / N browse, escape leaves
and n steps again."""

from __future__ import annotations

import pytest

from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.modules import ModulePanel
from backstep.tui.panels.saved import SavedPanel
from backstep.tui.panels.search import SearchBar, matches, pick
from backstep.tui.state.records import Graph
from tests.tui_fixtures import (
    ACC_X,
    ACC_Y,
    ADD,
    MUL,
    POW,
    RecordingLink,
    live_app,
    long_name_events,
    no_wider,
    two_passes_own_ids,
    unrolled_events,
)
from tests.tui_pilot import pilot, screen_text, settle, type_query


def graph() -> Graph:
    begin = next(e for e in long_name_events() if e["event"] == "pass_begin")
    return Graph.build(begin["nodes"], begin["roots"])


def test_matches_name_module_and_leaf_in_graph_order() -> None:
    g = graph()
    assert matches(g, "accumulate") == [ACC_X, ACC_Y]
    assert matches(g, "ln_2") == [ACC_X]  # a leaf name
    assert matches(g, "MLP.C_PROJ") == [POW, ADD, MUL, ACC_Y]  # module path or leaf, any case
    assert matches(g, "backward0") == [POW, ADD, MUL]
    assert matches(g, "nothing like it") == [] and matches(g, "  ") == []


def test_pick_wraps_both_ways() -> None:
    assert pick([2, 4, 6], 4, 1) == 6 and pick([2, 4, 6], 6, 1) == 2
    assert pick([2, 4, 6], 2, -1) == 6 and pick([2, 4, 6], 99, -1) == 6
    assert pick([2, 4, 6], None, 1) == 2 and pick([], 1, 1) is None


@pilot
async def test_slash_enter_n_and_escape() -> None:
    link = RecordingLink(long_name_events(), stop=1)
    app = live_app(link)
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        assert not app.query_one(SearchBar).display
        await type_query(pilot, "accum")  # 'n' and 'u' typed go to the query, not to step
        assert app.selected == ACC_X
        assert not [m for m in link.sent if m.get("cmd") == "step"]
        assert "1/2" in screen_text(app)
        await pilot.press("n")
        await pilot.pause()
        assert app.selected == ACC_Y  # n = next match while the search is up
        await pilot.press("n")
        await pilot.pause()
        assert app.selected == ACC_X  # wraps round
        await pilot.press("N")
        await pilot.pause()
        assert app.selected == ACC_Y
        assert not [m for m in link.sent if m.get("cmd") == "step"]
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query_one(SearchBar).display and app.searching is None
        await pilot.press("n")  # steps again
        await pilot.pause()
        assert [m for m in link.sent if m.get("cmd") == "step"]


@pilot
async def test_search_by_leaf_name_and_no_match() -> None:
    app = live_app(RecordingLink(long_name_events(), stop=1))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await type_query(pilot, "c_proj.bias")
        assert app.selected == ACC_Y
        await type_query(pilot, "zzz")
        assert "no match" in screen_text(app)
        assert app.selected == ACC_Y  # nothing moved
        assert app.focused is app.query_one(SearchBar).input  # still typing
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query_one(SearchBar).display





@pilot
async def test_search_while_reviewing_an_earlier_pass_selects_its_node() -> None:
    link = RecordingLink(two_passes_own_ids(), stop=6)  # the start of pass 2 (f from pass 1)
    app = live_app(link)
    async with app.run_test(size=(140, 42)) as pilot:
        await pilot.pause()
        await pilot.press("p")  # reviewing pass 1, before its last node
        await pilot.pause()
        assert app.review is not None and app.review.number == 1
        await type_query(pilot, "MulBack")
        assert "1/1" in screen_text(app)
        assert app.selected == MUL  # pass 1's node, not pass 2's
        assert app.query_one(GraphPanel).cursor_node.data.node == MUL  # the graph's cursor too
        text = screen_text(app)
        assert "no node selected" not in text
        assert f"Gradients · MulBackward0 #{MUL}" in text
        assert app.query_one(GradientsPanel)._focus.record is not None  # what it received
        assert app.query_one(SavedPanel)._focus.saved  # other, self: as at the live stop
        assert link.sent == []  # searching a review never talks to the debuggee


@pilot
async def test_search_while_reviewing_in_the_module_view() -> None:
    app = live_app(RecordingLink(two_passes_own_ids(), stop=6))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("p", "m")  # pass 1 under review, its modules
        await pilot.pause()
        await type_query(pilot, "MulBack")
        panel = app.query_one(ModulePanel)
        assert app.selected == MUL and app.focused is panel
        assert panel.cursor_node is not None and panel.cursor_node.data == ("node", MUL)


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (200, 50)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_an_unrolled_loop_s_branch_rows_tell_apart_where_they_are(
        size: tuple[int, int]) -> None:
    """Issue 44: after / in an unrolled LSTM the graph showed 19 identical rows
    "├ + ⑂ AddmmBackward0 +11 more": a branch row names its head's #id too (the module and
    forward line are every step's same), and keeps it when the row is short of room."""
    app = live_app(RecordingLink(unrolled_events()))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await type_query(pilot, "Addmm")
        for _ in range(3):
            await pilot.press("n")
        await settle(pilot)
        graph = app.query_one(GraphPanel)
        branches = [line.node.label.plain for line in graph._tree_lines
                    if line.node.data is not None and line.node.data.kind == "path"]
        assert len(branches) == 19  # the twentieth step's branch is the heavy path
        assert len(set(branches)) == 19, branches  # each says where it is
        for label, line in zip(branches, [ln for ln in graph._tree_lines
                                         if ln.node.data is not None
                                         and ln.node.data.kind == "path"], strict=True):
            assert f"#{line.node.data.node}" in label and "+2" in label, label
        assert no_wider(graph)
