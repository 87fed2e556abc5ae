"""The Leaves panel fits its width: numbers keep theirs, the bar narrows then goes, names are cut
only from the left (the tail says which parameter), and a resize re-cuts the rows it keeps; a
pass change rewrites the rows near view, a scroll the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.text import Text

from backstep.traces.index import TraceIndex
from backstep.tui.app import BackstepApp
from backstep.tui.panels.leaves import (
    COLUMNS,
    LeavesPanel,
    Scale,
    column_widths,
    joined,
    name_label,
)
from backstep.tui.text.format import fit_number
from tests.synthetic_traces import write_transformer_trace
from tests.tui_fixtures import (
    LONG_LEAVES,
    RecordingLink,
    gpt_named_events,
    live_app,
    long_name_events,
    no_wider,
    replay_app,
    summary,
)
from tests.tui_fixtures import (
    long_name_app as make_app,
)
from tests.tui_pilot import pilot, screen_text, settle

FULL = tuple(w for _, w, _ in COLUMNS)


def test_column_widths_fit_the_room_and_give_way_in_order() -> None:
    assert column_widths(56)[1:5] == FULL[1:5]  # the 140-column layout: every number in full
    assert column_widths(80)[5] == FULL[5]  # and the bar at full length where there is room
    for room in range(28, 120):
        widths = column_widths(room)
        assert sum(widths) <= room, (room, widths)
        assert widths[2] == FULL[2] and widths[3] == FULL[3]  # "now" and "change" never shrink
    assert column_widths(45)[5] < FULL[5]  # the bar narrows first ...
    narrow = column_widths(31)
    assert narrow[5] == 0 and narrow[1] == 0  # ... then it and "before" go
    assert column_widths(80)[0] > column_widths(56)[0]  # the name takes what is left


def test_name_label_cuts_from_the_left_and_drops_the_retain_grad_tag_when_short() -> None:
    name = "model.transformer.h.11.mlp.c_proj.bias"
    assert name_label(name, False, 16).plain == "…mlp.c_proj.bias"
    assert name_label("h", True, 30).plain == "h (retain_grad)"
    assert name_label(name, True, 16).plain == "…mlp.c_proj.bias"  # no room: the name wins


def shown_names(app: BackstepApp) -> list[str]:
    panel = app.query_one(LeavesPanel)
    return [panel.row_cells(i)[0].plain.strip() for i in range(panel.row_count)]


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (140, 42), (170, 48)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_leaf_rows_fit_the_panel_and_names_keep_their_tail(size: tuple[int, int]) -> None:
    app = live_app(RecordingLink(gpt_named_events()))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        panel = app.query_one(LeavesPanel)
        assert no_wider(panel)  # none cut at the right
        names = shown_names(app)
        assert len(names) >= 5
        for shown in names:
            if shown == "input":
                continue
            # at 110 columns the numbers' separating spaces take two of the name's cells
            assert shown.endswith("c_fc.weight" if size[0] > 110 else "fc.weight"), shown
            assert shown.startswith(("…", "model.")), shown
        if size[0] >= 170:  # wide: the block index that tells the rows apart is on screen
            assert "h.22.mlp.c_fc.weight" in names[0], names[0]


@pilot
async def test_a_resize_re_cuts_the_rows_it_keeps() -> None:
    app = make_app(stop=5)  # one leaf accumulated, one pending
    async with app.run_test(size=(170, 48)) as pilot:
        await settle(pilot)
        panel = app.query_one(LeavesPanel)
        rows = panel._rows
        wide = shown_names(app)
        assert any(LONG_LEAVES["x"].endswith(n.lstrip("…")) for n in wide)
        await pilot.resize_terminal(110, 32)
        await settle(pilot)
        narrow = shown_names(app)
        assert panel._rows is rows  # the same rows, their texts made again
        assert all(len(n) < len(w) for n, w in zip(narrow, wide, strict=True)), (narrow, wide)
        assert no_wider(panel)
        assert "64" in screen_text(app)  # the accumulated value still shown
        await pilot.resize_terminal(170, 48)
        await settle(pilot)
        assert shown_names(app) == wide


@pilot
async def test_a_pass_change_rewrites_the_rows_near_view_and_a_scroll_the_rest(
        tmp_path: Path) -> None:
    trace = tmp_path / "norms.jsonl"
    write_transformer_trace(trace, passes=3, nodes=1500, norms=True)  # 300 weights
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await settle(pilot)
            panel = app.query_one(LeavesPanel)
            rows = panel.row_count
            assert rows > 250
            app.driver.jump(f"1:{len(app.snapshot.pass_.graph.nodes)}")  # the pass's last
            await settle(pilot)  # step: every weight accumulated
            assert "pending" not in screen_text(app)
            made: list[int] = []
            row_text = panel.row_text

            def counted(index: int) -> Text:
                made.append(index)
                return row_text(index)

            panel.row_text = counted  # type: ignore[method-assign]
            await pilot.press("right_square_bracket")  # every weight pending again
            await settle(pilot)
            assert 0 < len(made) <= panel.size.height  # only the rows drawn are made again
            assert all(i in panel.rows_in_view() for i in made)
            last = rows - 1
            assert last not in made
            panel.scroll_end(animate=False)
            await settle(pilot)
            assert last in made  # the scroll brought it up to date
            snapshot = app.snapshot
            name = panel._rows[last]
            fresh = panel._cells(name, None, snapshot, Scale(dict(snapshot.leaf_norms)))
            assert joined(fresh, panel._widths).plain in screen_text(app)


def small_norm_events() -> list[dict[str, Any]]:
    """``long_name_events()`` with a second pass's worth of small norms on x: before ‖0.0106‖,
    now ‖0.0148‖ (what ran together as ``‖0.0106…‖0.0148…‖+0.0042‖`` at 140 columns)."""
    events = long_name_events()
    for ev in events:
        if ev["event"] == "accumulate" and ev["leaf"] == LONG_LEAVES["x"]:
            ev["before"] = summary([0.0106342 * 0.6, 0.0106342 * 0.8], [2])
            ev["after"] = summary([0.0148134 * 0.6, 0.0148134 * 0.8], [2])
    return events


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (140, 42), (160, 48)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_numbers_keep_a_space_between_them_and_lose_digits_not_their_ends(
        size: tuple[int, int]) -> None:
    app = live_app(RecordingLink(small_norm_events(), stop=5))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        panel = app.query_one(LeavesPanel)
        row = panel._rows.index(LONG_LEAVES["x"])
        cells = [c.plain for c in panel.row_cells(row)]
        numbers = [c for c, w in zip(cells[1:4], panel._widths[1:4], strict=True) if w]
        assert len(numbers) >= 2, cells  # "now" and "change" at every size
        for text in numbers:
            assert text.startswith(" "), cells  # a space before each number
            assert "…" not in text, cells  # never cut
        assert numbers[-1].strip().startswith("‖+0.004"), cells  # the change, its sign kept
        assert numbers[-2].strip().startswith("‖0.01"), cells
        assert "‖‖" not in panel.text_of(row).plain, cells


def test_fit_number_loses_digits_not_the_number() -> None:
    assert fit_number(0.0106342, 7) == "0.01063"
    assert fit_number(0.0106342, 6) == "0.0106"
    assert fit_number(1.063e-5, 7) == "1.06e-5"  # the exponent's own digits kept short
    assert fit_number(-0.00423, 7, sign=True) == "-0.0042"
    assert fit_number(0.00423, 7, sign=True) == "+0.0042"
    assert fit_number(64.0, 7, sign=True) == "+64"
    assert fit_number(float("inf"), 7, sign=True) == "+inf"  # an overflowed difference


@pilot
async def test_a_pending_leaf_reads_pending_and_draws_no_bar() -> None:
    """Issue 44: in pass 2, before a leaf's AccumulateGrad ran, its row drew the last pass's
    ‖grad‖ bar beside an empty "before": read as this pass's gradient. It reads pending."""
    from tests.tui_fixtures import two_passes_own_ids

    app = live_app(RecordingLink(two_passes_own_ids(), stop=10))  # pass 2, before AccGrad y
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        assert app.snapshot.pass_.number == 2 and dict(app.snapshot.leaf_norms).get("y")
        panel = app.query_one(LeavesPanel)
        cells = {panel.row_cells(i)[0].plain.strip(): [c.plain.strip()
                                                       for c in panel.row_cells(i)]
                 for i in range(panel.row_count)}
        assert cells["x"][2] == "64" and "█" in cells["x"][5]  # accumulated: its bar
        assert cells["y"][2] == "pending" and cells["y"][5] == "", cells["y"]
        row = next(line for line in screen_text(app).splitlines() if " y " in line
                   and "pending" in line)
        assert "█" not in row and "▏" not in row, row


@pytest.mark.parametrize("size", [(110, 32), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_leaves_that_come_after_the_first_frame_keep_the_scrollbar_s_room(
        size: tuple[int, int]) -> None:
    """Found running time_sequence_prediction at 110x32: the columns were fitted to the
    panel before its leaves came, and the vertical scrollbar the leaves brought took a column
    from them: "change" was cut and a horizontal scrollbar drew its thumb on the last row."""
    from tests.tui_fixtures import unrolled_events

    events = unrolled_events(12)
    for node in events[1]["nodes"]:  # a leaf of its own at every step: 13 rows, it scrolls
        if node["name"] == "ViewBackward0":
            node["next"] = [1000 + node["id"]]
    events[1]["nodes"] += [{"id": 1000 + n["id"], "name": "AccumulateGrad", "next": [],
                            "leaf": f"net.cell.step{n['id']}.weight", "source": None,
                            "module": None}
                           for n in list(events[1]["nodes"]) if n["name"] == "ViewBackward0"]
    link = RecordingLink(events[:1], stop=1)  # the session only: the pass comes later
    app = live_app(link)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for event in events[1:]:
            app.driver.reader.feed(event)
        await settle(pilot)
        panel = app.query_one(LeavesPanel)
        assert panel.row_count == 14 and panel.max_scroll_y > 0
        assert no_wider(panel) and panel.max_scroll_x == 0
        if panel.region.bottom <= size[1]:  # on screen (at 80x24 a scroll away)
            header = screen_text(app).splitlines()[panel.region.y + 1]
            assert "change" in header, header
