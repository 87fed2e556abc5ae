"""A scrolling list of one-line rows under a header, each row one Text drawn straight to a strip.

DataTable renders every cell in view through rich (a ``Styled`` ``Padding`` per cell) and, when
any cell changes, renders every cell in view again: 0.45 ms a row, 7 ms of a replay's pass
change for the leaves on screen. Here a row is one Text that its owner makes only when the row
is first drawn (``row_text``), and ``forget`` says which rows to make again; drawing one is a
split into segments and a restyle. It looks and moves like DataTable with a row cursor: the
same component styles (header, cursor, hover), keys, mouse and scrolling.
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip


class RowList(ScrollView, can_focus=True):
    """Rows under a fixed header; subclasses make a row's Text in ``row_text``."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rowlist--header", "rowlist--cursor", "rowlist--hover"}

    # DataTable's rules for these parts, so that the panel looks as it did
    DEFAULT_CSS = """
    RowList {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .rowlist--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .rowlist--header {
                background-tint: $foreground 5%;
            }
        }
        & > .rowlist--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .rowlist--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .rowlist--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .rowlist--hover {
            background: $block-hover-background;
        }
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first", "First row", show=False),
        Binding("end,ctrl+end", "last", "Last row", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, always_update=False)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._header = Text()
        self._count = 0
        self._width = 0  # the rows' width in cells (the header's)
        self._texts: dict[int, Text] = {}  # rows made so far, by index
        self._hover = -1  # the row under the mouse, shown while the mouse moves
        self._frame: tuple[Style, Style, Style, Style] | None = None  # styles, once a frame

    # -- for the owner ----------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return self._count

    def set_header(self, header: Text) -> None:
        """The header line; its width is every row's."""
        self._header = header
        self._width = header.cell_len
        self._resize()

    def set_rows(self, count: int) -> None:
        """Hold ``count`` rows, none made yet (the cursor stays on its row where it can)."""
        self._count = count
        self._texts.clear()
        if self.cursor_row >= count:
            self.cursor_row = max(count - 1, 0)
        self._resize()

    def forget(self, index: int | None = None) -> None:
        """Row ``index`` (every row: None) is made again when next drawn."""
        if index is None:
            self._texts.clear()
            self.refresh()
        elif self._texts.pop(index, None) is not None:
            self.refresh_row(index)

    def row_text(self, index: int) -> Text:
        """Row ``index``'s text, as wide as the header (subclasses make it)."""
        raise NotImplementedError

    def text_of(self, index: int) -> Text:
        """Row ``index``'s text as it is drawn."""
        text = self._texts.get(index)
        if text is None:
            text = self._texts[index] = self.row_text(index)
        return text

    def rows_in_view(self) -> range:
        """The rows the panel shows at its scroll position."""
        top = int(self.scroll_y)
        return range(top, min(self._count, top + max(self.scrollable_content_region.height - 1,
                                                        0)))

    # -- drawing ----------------------------------------------------------------------------

    def _resize(self) -> None:
        self.virtual_size = Size(self._width, self._count + 1)  # the header is a line
        self.refresh()

    def _styles(self) -> tuple[Style, Style, Style, Style]:
        """The row, header, cursor and hover styles (``rich_style`` walks every ancestor)."""
        get = self.get_component_rich_style
        return (self.rich_style, self.get_component_styles("rowlist--header").rich_style,
                get("rowlist--cursor"), get("rowlist--hover"))

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = self._styles()  # once a frame, not once a line
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        base, header, cursor, hover = self._frame or self._styles()
        width = self.size.width
        x = int(self.scroll_x)
        if y == 0:
            return self._strip(self._header, header, Style(), width, x)
        row = y - 1 + int(self.scroll_y)
        if row >= self._count:
            return Strip.blank(width, base)
        part = Style()
        if row == self._hover:
            part += hover
        if row == self.cursor_row:
            part += cursor
        return self._strip(self.text_of(row), base, part, width, x)

    def _strip(self, text: Text, row_style: Style, part: Style, width: int, x: int) -> Strip:
        """A row as DataTable draws one: its cells in the row's style with the cursor's or
        hover's over them (their colours win), and the cells past the table the same."""
        console = self.app.console
        pre = row_style + part
        post = Style.from_color(part.color) + Style.from_color(bgcolor=part.bgcolor)
        if text.spans:
            segments = list(text.render(console, end=""))
        else:  # rich draws a text without spans in no style, even its own
            own = console.get_style(text.style, default=Style.null()) if text.style else None
            segments = [Segment(text.plain, own)]
        short = self._width - text.cell_len
        if short > 0:
            segments.append(Segment(" " * short))
        segments = list(Segment.apply_style(segments, pre, post))
        segments.append(Segment(" " * max(0, width - self._width), pre))
        return Strip(segments).crop(x, x + width).adjust_cell_length(width, row_style)

    def refresh_row(self, row: int) -> None:
        """Draw row ``row`` again (where it is in view)."""
        y = row - int(self.scroll_y) + 1
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    # -- moving -----------------------------------------------------------------------------

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, self._count - 1))

    def watch_cursor_row(self, old: int, new: int) -> None:
        self.refresh_row(old)
        self.refresh_row(new)
        self._cursor_into_view()

    def _cursor_into_view(self) -> None:
        rows = max(self.scrollable_content_region.height - 1, 1)
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, force=True)
        elif self.cursor_row >= top + rows:
            self.scroll_to(y=self.cursor_row - rows + 1, animate=False, force=True)

    def _keyboard(self) -> None:
        """Keys hide the hover highlight, as DataTable's do."""
        if self._hover >= 0:
            old, self._hover = self._hover, -1
            self.refresh_row(old)

    def action_cursor_up(self) -> None:
        self._keyboard()
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self._keyboard()
        self.cursor_row += 1

    def _page(self, sign: int) -> None:
        """The view and the cursor a page on, as DataTable moves them."""
        self._keyboard()
        page = sign * max(self.scrollable_content_region.height - 1, 1)
        self.scroll_to(y=self.scroll_y + page, animate=False, force=True)
        self.cursor_row += page

    def action_page_up(self) -> None:
        self._page(-1)

    def action_page_down(self) -> None:
        self._page(1)

    def action_first(self) -> None:
        self._keyboard()
        self.cursor_row = 0

    def action_last(self) -> None:
        self._keyboard()
        self.cursor_row = self._count - 1

    def _row_at(self, event: events.MouseEvent) -> int:
        """The row under the mouse, or -1 (the header, or past the last row)."""
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return -1
        row = offset.y - 1 + int(self.scroll_y)
        return row if row < self._count else -1

    def on_mouse_move(self, event: events.MouseMove) -> None:
        row = self._row_at(event)
        if row != self._hover:
            old, self._hover = self._hover, row
            self.refresh_row(old)
            self.refresh_row(row)

    def on_leave(self, event: events.Leave) -> None:
        self._keyboard()

    def on_click(self, event: events.Click) -> None:
        row = self._row_at(event)
        if row >= 0:
            self.cursor_row = row
