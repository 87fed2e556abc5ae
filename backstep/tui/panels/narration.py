"""The narration panel: a demo's explanation of the current stop (only when a narration is given).

Texts are templates filled from the run (see ``backstep.demo.narration``): values the script printed as
``measured:`` lines in the console, and the ids of the nodes that ran at each (pass, step).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from rich.markdown import Markdown
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from backstep.demo.narration import MISSING, fields, measured, render
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.state.snapshot import Snapshot

# kept as Markdown: code spans, and **bold** that opens before a letter at a word's start;
# every other "*" is arithmetic
KEPT_OR_STAR = re.compile(r"(`[^`]*`)|((?<![\w)\]*])\*\*[A-Za-z`][^*\n]*?(?<=\S)\*\*(?![\w*]))|\*")


def as_markdown(text: str) -> Markdown:
    """A narration as Markdown, its arithmetic taken literally: the texts say ``d(x*y)/dx``,
    ``16*3 = 48`` and ``x**3 ... 3x**2``, which Markdown would read as emphasis (``163 = 48`` in
    italics). Code spans and ``**bold**`` words stay Markdown."""
    return Markdown(KEPT_OR_STAR.sub(lambda m: m.group(1) or m.group(2) or r"\*", text))


def stale(about: tuple[int, int, str, str], pass_: int, step: int) -> str:
    """The template for a stop without a text of its own: the last stop's text, headed by the
    stop it is about, so that it never reads as this step's ("Here the NaN is born" at the next
    node, or in the next pass)."""
    was_pass, was_step, name, template = about
    if was_pass == pass_:
        here, there = f"step {step}", f"step {was_step}"
    else:
        here, there = f"pass {pass_} · step {step}", f"pass {was_pass} · step {was_step}"
    head = f"**No note for {here}.** The last note, about {there} (`{name}`):"
    return head.replace("{", "{{").replace("}", "}}") + "\n\n" + template


class Narration(Protocol):
    title: str
    intro: str
    outro: str | None

    def text_for(self, pass_: int, step: int, node: str) -> str | None: ...


class NarrationPanel(VerticalScroll):
    """Shows the intro, then the text for each stop, then the outro once the script exits.

    The text sits in a scrolling container: at 80x24 the panel has four rows, and a stop's text
    is longer, so it scrolls (wheel, or arrows once focused) inside the panel's border."""

    def __init__(self, narration: Narration, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.narration = narration
        self.border_title = narration.title or "Narration"
        self.template = narration.intro or ""
        self.text = render(self.template, {})
        self._key: tuple[int, int] | None = None
        self._about: tuple[int, int, str, str] | None = None  # the last stop with a text of its own
        self._ids: dict[int, dict[int, int]] = {}
        self._saved: dict[str, int] = {}  # the current stop's saved tensors: name -> bytes
        self._noted: dict[int, int] = {}  # per pass: how many executed nodes _ids has seen

    def compose(self) -> ComposeResult:
        yield Static(as_markdown(self.text), id="narration-text")

    def on_mount(self) -> None:
        # console output can arrive after the stop or exit it explains: fill late values in
        self.set_interval(0.25, self._fill_missing)

    def show(self, snapshot: Snapshot) -> None:
        self._note_ids(snapshot)
        template: str | None = None
        if snapshot.exit is not None:
            template = self.narration.outro
        elif snapshot.stop is not None:
            key = (snapshot.stop.pass_, snapshot.stop.step)
            if key == self._key:
                return
            self._key = key
            stop = snapshot.stop
            template = self.narration.text_for(stop.pass_, stop.step, stop.name)
            if template is not None:
                self._about = (stop.pass_, stop.step, stop.name, template)
            elif self._about is not None:  # no text of its own: the last one, saying whose
                template = stale(self._about, stop.pass_, stop.step)
        if template is not None:
            self.template = template
        self._refill()

    def values(self) -> dict[str, Any]:
        """What the templates can use now: the script's measured values, the node ids, and the
        current stop's saved-tensor bytes."""
        consoles = self.app.query(ConsolePanel) if self.is_attached else []
        out = measured(consoles.first().text) if consoles else {}
        out["id"] = self._ids
        out["saved"] = self._saved
        return out

    def _note_ids(self, snapshot: Snapshot) -> None:
        stop = snapshot.stop
        if stop is not None:
            self._ids.setdefault(stop.pass_, {})[stop.step] = stop.id
            self._saved = {item.name: item.bytes for item in stop.saved}
        view = snapshot.pass_
        if view is not None:
            steps = self._ids.setdefault(view.number, {})
            executed = view.executed()
            for node_id in executed[self._noted.get(view.number, 0):]:
                record = view.record(node_id)
                if record is not None:
                    steps[record.step] = record.id
            self._noted[view.number] = len(executed)

    def _fill_missing(self) -> None:
        if MISSING in self.text:
            self._refill()

    def _refill(self) -> None:
        text = render(self.template, self.values() if fields(self.template) else {})
        if text != self.text:
            self.text = text
            self.query_one("#narration-text", Static).update(as_markdown(text))
            self.scroll_home(animate=False)
