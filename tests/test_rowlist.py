"""RowList: rows made only when drawn, made again only when forgotten, and a row cursor that
moves, pages, follows the mouse and stays in view, as DataTable's does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from backstep.tui.widgets.rowlist import RowList
from tests.tui_pilot import pilot

ROWS = 100


class Numbers(RowList):
    def __init__(self) -> None:
        super().__init__()
        self.made: list[int] = []
        self.version = 0

    def on_mount(self) -> None:
        self.set_header(Text("row      "))
        self.set_rows(ROWS)

    def row_text(self, index: int) -> Text:
        self.made.append(index)
        return Text(f"{index:<4}v{self.version:<4}", style="italic" if index == 7 else "")


class NumbersApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Numbers()


@asynccontextmanager
async def mounted() -> AsyncIterator[tuple[NumbersApp, Pilot[None], Numbers]]:
    """The app at 20x12 (11 rows under the header), drawn once."""
    app = NumbersApp()
    async with app.run_test(size=(20, 12)) as pilot:
        await pilot.pause()
        yield app, pilot, app.query_one(Numbers)


def style(panel: Numbers, y: int) -> Style | None:
    """The style of line ``y``'s first cell."""
    return next(iter(panel.render_line(y))).style


def lines(app: NumbersApp) -> list[str]:
    panel = app.query_one(Numbers)
    return [panel.render_line(y).text for y in range(panel.size.height)]


@pilot
async def test_only_rows_drawn_are_made_and_forgotten_ones_again() -> None:
    async with mounted() as (app, pilot, panel):
        shown = lines(app)
        assert shown[0].startswith("row")
        assert shown[1].startswith("0   v0") and shown[11].startswith("10  v0")
        assert sorted(set(panel.made)) == list(range(11))  # 11 rows on screen, of 100
        panel.made.clear()
        panel.version = 1
        panel.forget(3)
        await pilot.pause()
        assert panel.made == [3] and lines(app)[4].startswith("3   v1")
        assert lines(app)[5].startswith("4   v0")  # not forgotten: kept
        panel.forget()
        await pilot.pause()
        assert lines(app)[5].startswith("4   v1")
        assert list(panel.rows_in_view()) == list(range(11))


@pilot
async def test_the_cursor_moves_pages_and_stays_in_view() -> None:
    async with mounted() as (app, pilot, panel):
        panel.focus()
        await pilot.press("down", "down")
        assert panel.cursor_row == 2 and panel.scroll_y == 0
        await pilot.press("pagedown")  # a page is the rows under the header
        assert panel.cursor_row == 13 and panel.scroll_y == 11
        await pilot.press("end")
        await pilot.pause()
        assert panel.cursor_row == ROWS - 1
        assert lines(app)[-1].startswith(f"{ROWS - 1}")  # scrolled to the last row
        await pilot.press("up")
        assert panel.cursor_row == ROWS - 2
        await pilot.press("home")
        await pilot.pause()
        assert panel.cursor_row == 0 and panel.scroll_y == 0
        await pilot.press("up", "pageup")  # never before the first row
        assert panel.cursor_row == 0
        panel.set_rows(5)  # fewer rows: the cursor on the last where it was past it
        panel.cursor_row = 4
        panel.set_rows(3)
        assert panel.cursor_row == 2


@pilot
async def test_the_cursor_and_the_mouse_rows_are_drawn_in_their_styles() -> None:
    async with mounted() as (app, pilot, panel):
        plain = style(panel, 2)
        cursor = style(panel, 1)
        assert plain is not None and cursor is not None
        assert cursor.bgcolor != plain.bgcolor  # row 0 carries the cursor
        await pilot.hover(Numbers, offset=(2, 3))  # over row 2
        await pilot.pause()
        hovered = style(panel, 3)
        assert hovered is not None and hovered.bgcolor not in (plain.bgcolor, cursor.bgcolor)
        await pilot.click(Numbers, offset=(2, 5))  # row 4
        assert panel.cursor_row == 4
        await pilot.hover(Numbers, offset=(2, 0))  # the header: no row
        await pilot.pause()
        assert style(panel, 3) == plain
        italic = style(panel, 8)  # a row in one style, with no spans: drawn in it
        assert italic is not None and italic.italic and italic.bgcolor == plain.bgcolor
