"""The tensor view: one gradient's values, a page at a time, fetched from the debuggee."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from backstep.tui.text.format import num, shape_text

PAGE = 512


def per_row(width: int) -> int:
    """How many values a row of ``width`` cells holds: 8, else 4, 2 or 1 (the index at a
    row's start stays a multiple of what a row holds); 8 before the layout is known."""
    if width <= 0:
        return 8
    return next((n for n in (8, 4, 2) if 8 + 12 * n <= width), 1)  # its last space may go


def values_grid(values: list[Any], offset: int, per_row: int = 8) -> Text:
    """Flat values with their flat index at the start of each row."""
    text = Text()
    for start in range(0, len(values), per_row):
        text.append(f"{offset + start:>8} ", style="dim")
        for v in values[start : start + per_row]:
            cell = num(v)
            cell.pad_left(max(0, 11 - cell.cell_len))
            text.append_text(cell)
            text.append(" ")
        text.append("\n")
    return text


class TensorView(ModalScreen[None]):
    """Asks for ``PAGE`` values at a time; ] and [ page, escape closes."""

    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("q", "close", "close"),
        Binding("right_square_bracket,pagedown", "page(1)", "next page"),
        Binding("left_square_bracket,pageup", "page(-1)", "previous page"),
    ]

    def __init__(self, title: str, request: Callable[[int, int], int | None]) -> None:
        """``request(offset, limit)`` sends a tensor command and returns its req id (None if
        the debuggee cannot be asked)."""
        super().__init__()
        self.title_text = title
        self.request = request
        self.page_start = 0
        self.numel: int | None = None
        self.pending: int | None = None
        self.body = Static(Text("fetching values…", style="dim"), id="tensor-body")
        self._values: tuple[list[Any], int] | None = None  # the page shown, and its offset
        self.header = Static(Text(title, style="bold"), id="tensor-title")

    def compose(self) -> ComposeResult:
        with Vertical(id="tensor-box"):
            yield self.header
            with VerticalScroll():
                yield self.body
            yield Static("] next page   [ previous page   escape close", classes="dim-hint")

    def on_mount(self) -> None:
        self._fetch()

    def _fetch(self) -> None:
        self.pending = self.request(self.page_start, PAGE)
        if self.pending is None:
            self.body.update(Text("the debuggee is not paused: values cannot be fetched now",
                                  style="yellow"))

    def answer(self, event: dict[str, Any]) -> bool:
        """Show an answer if it is ours; True when it was."""
        if event.get("req") != self.pending:
            return False
        self.pending = None
        numel = event.get("numel")
        self.numel = numel if isinstance(numel, int) else None
        values = event.get("values") if isinstance(event.get("values"), list) else []
        offset = event.get("offset") if isinstance(event.get("offset"), int) else self.page_start
        end = offset + len(values)
        self.header.update(Text.assemble(
            (self.title_text, "bold"), "  ", shape_text(event.get("shape")),
            f" {event.get('dtype', '')}", (f"  values {offset}–{end - 1} of {self.numel}", "dim")))
        self._values = (values, offset)
        self._grid()
        return True

    def _grid(self) -> None:
        """The page's values in as many per row as the box has room for (at 80 columns a row
        of 8 ran past the box and wrapped in the middle)."""
        if self._values is not None:
            room = self.query_one("#tensor-box").content_region.width - 2  # a scrollbar's
            self.body.update(values_grid(*self._values, per_row=per_row(room)))

    def on_resize(self) -> None:
        self._grid()

    def error(self, message: str) -> None:
        self.pending = None
        self.body.update(Text(f"cannot fetch values: {message}", style="bold red"))

    def action_page(self, direction: int) -> None:
        if self.pending is not None:
            return
        new = self.page_start + direction * PAGE
        if new < 0 or (self.numel is not None and new >= self.numel):
            return
        self.page_start = new
        self._fetch()

    def action_close(self) -> None:
        self.dismiss(None)
