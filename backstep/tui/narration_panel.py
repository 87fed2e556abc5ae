"""The narration panel: a demo's explanation of the current stop (only when a narration is given)."""

from __future__ import annotations

from typing import Protocol

from rich.markdown import Markdown
from textual.widgets import Static

from backstep.tui.model import Snapshot


class Narration(Protocol):
    title: str
    intro: str
    outro: str | None

    def text_for(self, pass_: int, step: int, node: str) -> str | None: ...


class NarrationPanel(Static):
    """Shows the intro, then the text for each stop, then the outro once the script exits."""

    def __init__(self, narration: Narration, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.narration = narration
        self.border_title = narration.title or "Narration"
        self.text = narration.intro or ""
        self._key: tuple[int, int] | None = None

    def on_mount(self) -> None:
        self.update(Markdown(self.text))

    def show(self, snapshot: Snapshot) -> None:
        text: str | None = None
        if snapshot.exit is not None:
            text = self.narration.outro
        elif snapshot.stop is not None:
            key = (snapshot.stop.pass_, snapshot.stop.step)
            if key == self._key:
                return
            self._key = key
            text = self.narration.text_for(snapshot.stop.pass_, snapshot.stop.step,
                                           snapshot.stop.name)
        if text is not None and text != self.text:
            self.text = text
            self.update(Markdown(text))
