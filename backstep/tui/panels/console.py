"""The console panel: the script's stdout and stderr as they arrive, its traceback, and a line
for its stdin when it waits for one.

What a script prints reaches the screen as text: its colours and cursor moves are dropped, any
other escape sequence (a title, a clipboard write) is shown as it reads (``safe_text``). A
carriage return is then obeyed as a terminal's: a progress bar (tqdm) redraws its line in place.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate, islice

from rich.cells import cell_len
from rich.syntax import Syntax
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Input, Log, Static

from backstep import safe_text
from backstep.tui.panels.expression_line import ExpressionLine

_PIECES = re.compile(r"\r\n|\n|\r|[^\r\n]+")


class OutputLog(Log):
    r"""A ``Log`` that obeys carriage returns: the text after a line's last ``\r`` replaces
    the line (``\r\n`` is a newline), across writes too, so a bar updated in place takes one
    line, not one per update. It is given text that ``safe_text`` has made printable, so no
    other control character reaches it."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._returned = False  # a \r came last on the line: the next text replaces it
        # wrapping: the rows each line takes at ``_wrap_width``, their running total (from
        # ``_origin``, the rows of the lines pruned off the top: a prune shifts no total), and
        # the first line whose rows may have changed since (output only changes the last)
        self._wrap_width = 0
        self._heights: list[int] = []
        self._ends: list[int] = []
        self._origin = 0
        self._dirty = 0

    def write(self, data: str, scroll_end: bool | None = None) -> OutputLog:
        if not self._returned and "\r" not in data:  # the usual output: in one write
            self._write(data, scroll_end)
            return self
        for piece in _PIECES.findall(data):
            if piece == "\r":
                self._returned = True
                continue
            newline = piece in ("\n", "\r\n")
            if self._returned and not newline and self._lines:
                self._lines[-1] = ""  # Log.write appends to the last line: it starts afresh
            self._returned = False
            self._write("\n" if newline else piece, scroll_end)
        return self

    def _write(self, data: str, scroll_end: bool | None) -> None:
        self._dirty = min(self._dirty, max(len(self._lines) - 1, 0))
        super().write(data, scroll_end)
        self._wrap()
        if (self.auto_scroll if scroll_end is None else scroll_end) and \
                self.scroll_y < self.max_scroll_y:
            # the first line past its rows: Log scrolled before it had a scrollbar, which is
            # refused, and a held height (``ConsolePanel.hold_height``) brings no resize
            self.scroll_end(animate=False, x_axis=False)

    def _prune_max_lines(self) -> None:
        removed = len(self._lines) - (self.max_lines or len(self._lines))
        super()._prune_max_lines()
        if removed > 0:
            counted = min(removed, len(self._ends))
            if counted:
                self._origin = self._ends[counted - 1]
            del self._heights[:removed], self._ends[:removed]
            self._dirty = max(self._dirty - removed, 0)

    def clear(self) -> OutputLog:
        super().clear()
        self._heights, self._ends, self._origin, self._dirty = [], [], 0, 0
        return self

    def _wrap(self) -> None:
        """Count the rows each line takes at the log's width (the lines changed since the
        last count, or every line once the width changed) and size the log to them."""
        width = self.scrollable_content_region.width
        if width <= 0:
            return
        if width != self._wrap_width:
            self._wrap_width, self._dirty, self._origin = width, 0, 0
        count = self.line_count
        dirty = min(self._dirty, len(self._heights), len(self._ends))
        process = self._process_line
        del self._heights[dirty:], self._ends[dirty:]
        added = [max(1, -(-cell_len(process(line)) // width)) for line in self._lines[dirty:count]]
        self._heights.extend(added)
        base = self._ends[-1] if self._ends else self._origin
        self._ends.extend(islice(accumulate(added, initial=base), 1, None))
        self._dirty = count
        rows = self._ends[-1] - self._origin if self._ends else 0
        self.virtual_size = Size(width, rows)

    def render_line(self, y: int) -> Strip:
        """Row ``y`` on screen: a piece of the line it falls in, ``_wrap_width`` cells of it."""
        width = self._wrap_width
        if width != self.scrollable_content_region.width > 0:
            self.call_later(self._wrap)  # a scrollbar came or went: wrap again, then redraw
        if not width:
            return super().render_line(y)
        row = self.scroll_offset.y + y
        index = bisect_right(self._ends, row + self._origin)
        style = self.rich_style
        if index >= len(self._heights):
            return Strip.blank(self.size.width, style)
        start = (row + self._origin - (self._ends[index] - self._heights[index])) * width
        strip = self._render_line_strip(index, style).crop_extend(start, start + width, style)
        return strip.apply_offsets(start, index).extend_cell_length(self.size.width, style)

    def refresh_lines(self, y_start: int, line_count: int = 1) -> None:
        """A line's rows are not its index once lines wrap: the few rows on screen all
        redrawn."""
        self.refresh()

    def on_resize(self) -> None:
        """It grows with the output (up to its most lines): the last line stays in view."""
        self._wrap()
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=True, x_axis=False)


class StdinLine(Input):
    """One line for the script's stdin: enter sends it, ctrl+d ends the input (EOF), escape
    goes back to the graph and leaves the line open."""

    BINDINGS = [
        Binding("ctrl+d", "end_of_input", "end of input", show=False),
        Binding("escape", "leave", "back", show=False),
    ]

    class EndOfInput(Message):
        """The person pressed ctrl+d: the script's stdin ends."""

    def action_end_of_input(self) -> None:
        self.post_message(self.EndOfInput())

    def action_leave(self) -> None:
        self.screen.focus_next("#graph")


class ConsolePanel(Vertical):
    """A live log of the script's output (partial lines included) and, if it raised, the
    traceback highlighted."""

    ALLOW_MAXIMIZE = True  # z on the log maximises the whole panel, traceback included

    class Typed(Message):
        """A line the person typed for the script's stdin (newline included)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Ended(Message):
        """The person ended the script's stdin."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Console"
        self.log_view = OutputLog(max_lines=10_000, id="console-log")
        self.traceback_view = Static("", id="console-traceback")
        self.stdin_line = StdinLine(placeholder="the script reads stdin: type a line, enter "
                                    "sends it, ctrl+d ends the input", id="console-input")
        self.stdin_closed = False
        self._held = False  # the script runs: the log keeps its rows (``hold_height``)
        self.expression_line = ExpressionLine(id="console-expression", classes="console-line")

    def compose(self) -> ComposeResult:
        yield self.log_view
        yield self.traceback_view
        yield self.stdin_line
        yield self.expression_line

    def on_mount(self) -> None:
        self.stdin_line.display = False
        self.expression_line.display = False

    def asked(self, source: str) -> None:
        """Echo a console line the person sent (as a REPL shows its prompt)."""
        self._line_start()
        self.log_view.write(f">>> {safe_text.printable(source)}\n")
        self.log_view.scroll_end(animate=False)  # the person asked: the answer comes into view

    def answer(self, text: str) -> None:
        """An expression console's answer (a value or a traceback), made printable: it comes
        from the debuggee, or from a trace."""
        if text:
            self._line_start()
            self.log_view.write(f"{safe_text.lines(text)}\n")
            self.log_view.scroll_end(animate=False)

    def _line_start(self) -> None:
        if self.log_view.line_count and not self.text.endswith("\n"):
            self.log_view.write("\n")

    def write(self, text: str) -> None:
        self.log_view.write(safe_text.script_output(text))

    def hold_height(self) -> None:
        """While the script runs, the log keeps the rows it has and scrolls in them: a row
        more would lay the whole screen out again, every panel above one row shorter and
        drawn anew (the source highlighted again), once a printed line, while nothing in
        them changes. ``release_height`` (the next stop) lets it grow to what it holds."""
        self._held = True
        rows = self.log_view.size.height
        if rows > 0:
            self.log_view.styles.max_height = rows

    def release_height(self) -> None:
        """Let the log grow again, once the screen that called for it (a stop) is drawn: the
        layout its new rows bring comes after the stop is on screen, not before."""
        if self._held:
            self._held = False
            self.call_after_refresh(self._release)

    def _release(self) -> None:
        if not self._held and self.log_view.styles.inline.has_rule("max_height"):
            self.log_view.styles.max_height = None  # back to the stylesheet's

    def note(self, text: str) -> None:
        """A line from backstep itself, not the script."""
        self._line_start()
        self.log_view.write(f"[backstep] {safe_text.lines(text)}\n")

    @property
    def text(self) -> str:
        return "\n".join(self.log_view.lines)

    def show_traceback(self, traceback: str) -> None:
        self.traceback_view.update(
            Syntax(safe_text.lines(traceback.rstrip("\n")), "pytb", theme="ansi_dark", background_color="default",
                   word_wrap=True)
        )
        self.traceback_view.display = True
        self.add_class("-raised")

    # -- stdin ----------------------------------------------------------------------------

    def offer_input(self) -> bool:
        """Show the input line and give it the keyboard; False once stdin has ended."""
        if self.stdin_closed:
            return False
        self.stdin_line.display = True
        self.stdin_line.focus()
        return True

    def hide_input(self) -> None:
        if self.stdin_line.has_focus:
            self.screen.focus_next("#graph")
        self.stdin_line.display = False

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value + "\n"
        self.stdin_line.value = ""
        self.log_view.write(safe_text.script_output(text))  # echoed, as a terminal would
        self.hide_input()
        self.post_message(self.Typed(text))

    def on_stdin_line_end_of_input(self, event: StdinLine.EndOfInput) -> None:
        event.stop()
        self.stdin_closed = True
        self.hide_input()
        self.post_message(self.Ended())
