"""The console panel: the script's stdout and stderr as they arrive, and its traceback."""

from __future__ import annotations

from rich.syntax import Syntax
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static


class ConsolePanel(Vertical):
    """A live log of the script's output (partial lines included) and, if it raised, the
    traceback highlighted."""

    ALLOW_MAXIMIZE = True  # z on the log maximises the whole panel, traceback included

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Console"
        self.log_view = Log(max_lines=10_000, id="console-log")
        self.traceback_view = Static("", id="console-traceback")

    def compose(self) -> ComposeResult:
        yield self.log_view
        yield self.traceback_view

    def write(self, text: str) -> None:
        self.log_view.write(text)

    def note(self, text: str) -> None:
        """A line from backstep itself, not the script."""
        if self.log_view.line_count and not self.text.endswith("\n"):
            self.log_view.write("\n")
        self.log_view.write(f"[backstep] {text}\n")

    @property
    def text(self) -> str:
        return "\n".join(self.log_view.lines)

    def show_traceback(self, traceback: str) -> None:
        self.traceback_view.update(
            Syntax(traceback.rstrip("\n"), "pytb", theme="ansi_dark", background_color="default",
                   word_wrap=True)
        )
        self.traceback_view.display = True
