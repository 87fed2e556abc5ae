"""What the UI shows of a trace's or a peer's strings is shown, never obeyed.

Their control characters are made visible where they come in (``safe_text``: the trace index,
the channel, the console); here is the rest. Textual reads a ``str`` as markup in a
notification, a tree label or a border title, so ``[/]`` in a node name raised MarkupError and
``[@click=app.quit]`` ran an action: those take text, not markup. And a last guard: a control
character that still reaches a rendered line is dropped there and counted (the tests expect
none: each one is a string that missed its ``safe_text``).
"""

from __future__ import annotations

import re
from typing import Any

from rich.segment import Segment
from textual.app import App
from textual.color import Color
from textual.driver import Driver
from textual.filter import LineFilter

from backstep import safe_text
from backstep.tui.runtime.whole_writes import driver_class

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


class ControlGuard(LineFilter):
    """Drops control characters from rendered lines (they have no width: the layout stays)."""

    def __init__(self) -> None:
        super().__init__()
        self.caught = 0

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        search = _CONTROL.search
        out = segments
        for i, segment in enumerate(segments):
            if segment.control is None and search(segment.text):
                if out is segments:
                    out = list(segments)
                self.caught += 1
                out[i] = Segment(_CONTROL.sub("", segment.text), segment.style)
        return out


class PlainText(App[Any]):
    """The app's half: notifications are text, never markup, every line drawn passes the
    control guard, and every frame reaches the terminal whole."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.control_guard = ControlGuard()

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, its frames written whole (``whole_writes``: a frame cut short
        left stale rows on screen)."""
        return driver_class(super().get_driver_class())

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """As ``App.notify``, but ``message`` and ``title`` are shown as they read (``markup``
        is ignored: every notification here may carry a file name or a peer's words)."""
        super().notify(safe_text.lines(str(message)), title=safe_text.printable(title),
                       severity=severity, timeout=timeout, markup=False)

    def get_line_filters(self) -> list[LineFilter]:
        return [*super().get_line_filters(), self.control_guard]

