"""The console panel as a terminal shows a script's output: a carriage return redraws its line
(tqdm's bars), the panel takes the rows its output needs and no more, focusing it draws no second
border inside it; the breakpoint dialog fits at the four usual sizes; once the script has ended
the status line offers only the keys that still work."""

from __future__ import annotations

from typing import Any

import pytest

from backstep.tui.app import BackstepApp
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.status import StatusLine
from backstep.tui.runtime.leave_output import last_screenful
from tests.tui_fixtures import after_stop
from tests.tui_pilot import make_app, pilot, screen_text, settle

SIZES = [(80, 24), (110, 32), (140, 42), (160, 48)]
ids = [f"{w}x{h}" for w, h in SIZES]


def console_lines(app: BackstepApp) -> list[str]:
    return list(app.query_one(ConsolePanel).log_view.lines)


@pilot
async def test_a_carriage_return_redraws_the_line_in_place() -> None:
    app, _ = make_app()
    async with app.run_test(size=(110, 32)) as pilot:
        console = app.query_one(ConsolePanel)
        console.write("epoch 1\n")
        for done in range(0, 101, 10):  # tqdm: one write per update, "\r" first
            console.write(f"\r{done:3d}%|{'#' * (done // 10):10s}| {done}/100")
        console.write("\n")
        console.write("loss 0.5\r\n")  # \r\n is a newline: the text stays
        console.write("half a line")  # a partial line updated in place by a later event
        console.write("\rthe whole line")
        console.write("\r")  # nothing after the \r yet: the line stays as it is
        await pilot.pause()
        assert console_lines(app) == ["epoch 1", "100%|##########| 100/100", "loss 0.5",
                                      "the whole line"]
        console.write("\nnext")
        await pilot.pause()
        assert console_lines(app)[-2:] == ["the whole line", "next"]
        text = screen_text(app)
        assert "100%|##########| 100/100" in text and " 90%" not in text


@pilot
async def test_carriage_returns_are_obeyed_after_escaping_and_no_control_gets_through() -> None:
    app, _ = make_app()
    async with app.run_test(size=(110, 32)) as pilot:
        console = app.query_one(ConsolePanel)
        console.write("\x1b]0;title\x07 old\r\x1b[31mnew\x1b[0m \x1b]52;c;eA==\x07\x9b\n")
        console.note("a note\rnot a return")
        await pilot.pause()
        lines = console_lines(app)
        assert lines[0] == "new \\x1b]52;c;eA==\\x07\\x9b"  # the OSC shown, colours dropped
        assert lines[1] == "[backstep] a note\\rnot a return"  # backstep's own text: escaped
        assert not any(ch < " " or "\x7f" <= ch <= "\x9f" for line in lines for ch in line)


@pytest.mark.parametrize("size", SIZES, ids=ids)
@pilot
async def test_the_console_takes_the_rows_its_output_needs(size: tuple[int, int]) -> None:
    app, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        console = app.query_one(ConsolePanel)
        assert console.region.height == 3  # nothing printed yet: one row inside the border
        for i in range(3):
            console.write(f"output line {i}\n")
        await pilot.pause()
        assert console.region.height == 5
        for i in range(3, 40):
            console.write(f"output line {i}\n")
        await pilot.pause()
        await pilot.pause()
        most = 4 if size[0] < 110 else 5 if size[1] < 32 else 8
        assert console.region.height == most + 2
        text = screen_text(app)
        assert "output line 39" in text and f"output line {39 - most + 1}" in text
        assert app.query_one(StatusLine).region.bottom == size[1]


@pilot
async def test_while_the_script_runs_the_console_keeps_its_rows_and_grows_at_the_stop() -> None:
    """Output printed while nothing is stopped scrolls in the rows the console has: a row more
    would lay out and redraw every panel above it, once a printed line, through a whole pass."""
    app, link = make_app()
    async with app.run_test(size=(140, 42)) as pilot:
        await pilot.pause()
        console, graph = app.query_one(ConsolePanel), app.query_one("#graph")
        link.app = None  # the script runs on: no stop comes until the test feeds one
        await pilot.press("n")
        assert app.waiting
        rows, above = console.region, graph.region
        for i in range(3):
            console.write(f"output line {i}\n")
        await settle(pilot)
        assert (console.region, graph.region) == (rows, above)
        assert "output line 2" in screen_text(app)  # the newest line in view
        for event in after_stop(1, link.events):  # the next stop: the console grows
            app.driver.reader.feed(event)
        await settle(pilot)
        assert not app.waiting
        assert console.region.height == 5  # its three lines and the border
        assert graph.region.height == above.height - 2


@pytest.mark.parametrize("size", SIZES, ids=ids)
@pilot
async def test_focusing_the_console_draws_no_border_inside_it(size: tuple[int, int]) -> None:
    app, _ = make_app()
    async with app.run_test(size=size) as pilot:
        console = app.query_one(ConsolePanel)
        for i in range(4):
            console.write(f"output line {i}\n")
        console.log_view.focus()
        await pilot.pause()
        await pilot.pause()
        log = console.log_view
        assert log.has_focus
        assert log.content_region == console.content_region  # the log fills the panel
        text = screen_text(app)
        assert all(f"output line {i}" in text for i in range(4))


def inside(region: Any, box: Any) -> bool:
    return (region.x >= box.x and region.y >= box.y and region.right <= box.right
            and region.bottom <= box.bottom)


@pytest.mark.parametrize("conditions", [0, 8])
@pytest.mark.parametrize("size", SIZES + [(44, 24), (60, 30), (200, 50)],
                         ids=ids + ["44x24", "60x30", "200x50"])
@pilot
async def test_the_breakpoint_dialog_fits(size: tuple[int, int], conditions: int) -> None:
    """At every size, the Add button whole inside the border: under 66 columns (a notebook's
    frame) the kind takes a row of its own, where the button was cut (issue 44)."""
    breakpoints = [{"kind": "node", "pattern": f"Node{i}Backward*"} for i in range(conditions)]
    app, _ = make_app(breakpoints=breakpoints)
    async with app.run_test(size=size) as pilot:
        await pilot.press("B")
        await pilot.pause()
        await pilot.pause()
        dialog = app.screen
        box = dialog.query_one("#bp-box").content_region
        parts = ["#bp-title", "#bp-list", "#bp-kind", "#bp-value", "#bp-add", "#bp-error",
                 "#bp-remove", "#bp-done"]
        for selector in parts:
            region = dialog.query_one(selector).region
            assert region.height and inside(region, box), (selector, region, box)
        value, add = dialog.query_one("#bp-value").region, dialog.query_one("#bp-add").region
        assert add.x > value.right  # a gap: the button's edge is not lost against the field
        assert value.width >= 20 and add.width >= 9, (value, add)
        rows = screen_text(app).splitlines()
        assert "Add" in rows[add.y + 1][add.x:add.right]
        assert rows[add.y][add.x:add.right].strip() == "▔" * add.width  # its edges whole
        assert rows[add.bottom - 1][add.x:add.right].strip() == "▁" * add.width
        assert "Done" in rows[dialog.query_one("#bp-done").region.y + 1]


@pilot
async def test_after_the_script_ends_the_status_line_offers_what_still_works() -> None:
    app, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        status = app.query_one(StatusLine)
        assert " n step" in str(status.render())
        await pilot.press("c")
        await pilot.pause()
        line = str(status.render())
        assert "script exited with code 0" in line
        for gone in (" n step", " c continue", " f finish", " b break", " B conditions"):
            assert gone not in line, line
        for kept in (" q quit", " p review", " ? help"):
            assert kept in line, line
        await pilot.press("p")  # reviewing the ended script: still only what works
        await pilot.pause()
        line = str(status.render())
        assert "review" in line and " c continue" not in line and " q quit" in line


def test_the_last_screenful_counts_wrapped_rows() -> None:
    lines = [f"line {i}" for i in range(30)]
    assert last_screenful(lines, 23, 80) == lines[-23:]
    assert last_screenful(["x" * 200, "a", "b"], 4, 80) == ["a", "b"]  # 3 rows: no room
    assert last_screenful(["x" * 200, "a", "b"], 5, 80) == ["x" * 200, "a", "b"]
    assert last_screenful(["a", "", "b"], 10, 80) == ["a", "", "b"]


@pytest.mark.parametrize("size", SIZES, ids=ids)
@pilot
async def test_a_long_line_wraps_and_is_read_whole_with_no_stray_scrollbar(
        size: tuple[int, int]) -> None:
    """Issue 44: the console cut long lines at its edge, and the horizontal scrollbar that
    followed drew its thumb on an empty last row (a glyph floating in the console)."""
    app, _ = make_app()
    long = " ".join(f"w{i:03d}" for i in range(30)) + " END"  # 153 cells: two rows at 80
    async with app.run_test(size=size) as pilot:
        console = app.query_one(ConsolePanel)
        console.write("short line\n" + long + "\nlast line\n")
        await settle(pilot)
        log = console.log_view
        assert log.max_scroll_x == 0 and not log.show_horizontal_scrollbar
        box = log.content_region
        rows = [row[box.x:box.right].rstrip()
                for row in screen_text(app).splitlines()[box.y:box.bottom]]
        assert rows[0] == "short line" and rows[-1] == "last line", rows
        assert "".join(rows[1:-1]) == long  # every word, wrapped at the panel's width
        console.write("\n".join(f"more {i} " + long for i in range(20)) + "\n")  # it scrolls
        await settle(pilot)
        assert log.max_scroll_y > 0 and log.max_scroll_x == 0
        box = log.scrollable_content_region  # the vertical scrollbar's room kept
        rows = [row[box.x:box.right].rstrip()
                for row in screen_text(app).splitlines()[box.y:box.bottom]]
        assert rows[-1].endswith("END") and long.endswith(rows[-1]), rows  # wrapped again
        assert all(row for row in rows), rows  # no empty row (a scrollbar's)
        assert all(len(row) <= box.width for row in rows)


@pilot
async def test_wrapped_rows_stay_right_when_the_oldest_lines_are_dropped() -> None:
    app, _ = make_app()
    async with app.run_test(size=(110, 32)) as pilot:
        console = app.query_one(ConsolePanel)
        log = console.log_view
        log.max_lines = 30
        for i in range(100):  # every third line wraps onto a second row
            console.write(f"line {i:03d} " + ("x" * 150 if i % 3 == 0 else "") + "\n")
        await settle(pilot)
        width = log.scrollable_content_region.width
        want = sum(max(1, -(-len(line) // width)) for line in log.lines[:log.line_count])
        assert log.virtual_size.height == want and log.max_scroll_x == 0
        box = log.scrollable_content_region
        rows = [row[box.x:box.right].rstrip()
                for row in screen_text(app).splitlines()[box.y:box.bottom]]
        assert rows[-4:-1] == ["line 097", "line 098", ("line 099 " + "x" * 150)[:box.width]]
        assert rows[-1] == "x" * (159 - box.width), rows  # line 099's second row
        await pilot.resize_terminal(80, 24)  # a new width: every line wrapped again
        await settle(pilot)
        width = log.scrollable_content_region.width
        want = sum(max(1, -(-len(line) // width)) for line in log.lines[:log.line_count])
        assert log.virtual_size.height == want


@pilot
async def test_a_wrapped_progress_bar_redraws_in_place() -> None:
    app, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        console = app.query_one(ConsolePanel)
        console.write("epoch 1\n")
        for done in range(0, 101, 20):  # a tqdm line wider than the console
            console.write(f"\r{done:3d}% " + "#" * (done + 50))
        await settle(pilot)
        log = console.log_view
        width = log.scrollable_content_region.width
        assert console_lines(app) == ["epoch 1", "100% " + "#" * 150]
        assert log.virtual_size.height == 1 + -(-155 // width)  # its rows, not every update's
        console.write("\r  5% #\n")  # shorter again: one row
        await settle(pilot)
        assert log.virtual_size.height == 2
