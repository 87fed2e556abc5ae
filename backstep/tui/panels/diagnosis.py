"""The diagnosis banner: what went wrong, where and why, at the top of the main screen.

The engine's Diagnostician sends ``diagnosis`` events at any moment (while paused, after a pass
failed, after the script exited). The banner keeps the session's list, shows one at a time with
a "1 of 3" count, and stays hidden until there is something to say or after it is dismissed.
Which one is shown and whether it is dismissed is UI state, so it lives here, not in the model.
"""

from __future__ import annotations

import os

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from backstep.tui.state.records import Diagnosis, Related

ICONS = {"error": "✗", "warning": "⚠", "info": "ℹ"}
ROLES = {
    "freed_by": "freed by",
    "backward": "this backward",
    "inplace_op": "modified by",
    "created": "created at",
}
HINT = "d next · D previous · x dismiss"
SHORT_HINT = "x dismiss"  # what a narrow screen shows of HINT
RANK = {"info": 0, "warning": 1, "error": 2}  # an unknown severity is drawn as an error


def rank(diag: Diagnosis) -> int:
    return RANK.get(diag.severity, 2)


def where(file: str | None, line: int | None) -> str:
    """``train.py:12``: the base name is enough to find the line in a person's script."""
    name = os.path.basename(file) if file else "?"
    return f"{name}:{line}" if line is not None else name


def related_text(items: tuple[Related, ...]) -> Text:
    """One line per related source line: ``freed by      train.py:12  loss1.backward()``."""
    text = Text()
    width = max((len(ROLES.get(r.role, r.role.replace("_", " "))) for r in items), default=0)
    for i, item in enumerate(items):
        if i:
            text.append("\n")
        role = ROLES.get(item.role, item.role.replace("_", " "))
        text.append(f"{role:<{width}}  ", style="dim")
        text.append(where(item.file, item.line), style="bold")
        if item.code:
            text.append(f"  {item.code.strip()}", style="italic")
    return text


def tags_text(diag: Diagnosis) -> Text:
    """Small chips for the kind and the pass."""
    text = Text()
    text.append(f" {diag.kind} ", style="reverse")
    if diag.pass_ is not None:
        text.append(" ")
        text.append(f" pass {diag.pass_} ", style="reverse")
    return text


class DiagnosisBanner(Vertical):
    """Severity-coloured headline, the message wrapped, related lines, and the count."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.diagnoses: tuple[Diagnosis, ...] = ()
        self.index = 0
        self.dismissed = False
        self.latest_pass = 0  # the latest pass that began: a later one hides an earlier's banner

    def compose(self) -> ComposeResult:
        with Horizontal(id="diag-head"):
            yield Static(id="diag-title")
            yield Static(id="diag-tags")
            yield Static(id="diag-count")
            yield Static(HINT, id="diag-hint")
            yield Static(SHORT_HINT, id="diag-short")
        yield Static(id="diag-message")
        yield Static(id="diag-related")

    def on_mount(self) -> None:
        self._draw()

    @property
    def current(self) -> Diagnosis | None:
        """The diagnosis on screen, or None while the banner is hidden."""
        if self.dismissed or not self.diagnoses:
            return None
        return self.diagnoses[self.index]

    def show(self, diagnoses: tuple[Diagnosis, ...], passes: int = 0) -> bool:
        """Take the session's list; True when a new diagnosis has just come into view.

        A new one is brought into view when the banner was hidden (none yet, or dismissed) or
        when it is more severe than the one shown (a warning after an info): otherwise a person
        reading one diagnosis is not yanked to the next, the count grows. Of several new ones,
        the first of the most severe. Once a later pass than the shown diagnosis's begins
        (``passes``: the latest pass that began), the banner is put away (``d`` brings it back;
        the status line counts the diagnoses).
        """
        if passes > self.latest_pass:
            self.latest_pass = passes
            shown = self.current
            if shown is not None and shown.pass_ is not None and shown.pass_ < passes:
                self.dismiss()
        if diagnoses is self.diagnoses:
            return False
        before = len(self.diagnoses)
        shown = self.current
        self.diagnoses = diagnoses
        new = range(before, len(diagnoses))
        worst = max(new, key=lambda i: rank(diagnoses[i]), default=None)
        fresh = worst is not None and (
            before == 0 or self.dismissed or shown is None
            or rank(diagnoses[worst]) > rank(shown))
        if fresh and worst is not None:
            self.index = worst
            self.dismissed = False
        self.index = min(self.index, max(len(diagnoses) - 1, 0))
        self._draw()
        return fresh

    def step(self, delta: int) -> Diagnosis | None:
        """Go to the next (1) or previous (-1) diagnosis, wrapping; after a dismiss the banner
        first comes back on the one it showed."""
        if not self.diagnoses:
            return None
        if self.dismissed:
            self.dismissed = False
        else:
            self.index = (self.index + delta) % len(self.diagnoses)
        self._draw()
        return self.current

    def dismiss(self) -> bool:
        """Hide the banner; False when it was not shown."""
        if self.current is None:
            return False
        self.dismissed = True
        self._draw()
        return True

    def _draw(self) -> None:
        diag = self.current
        self.display = diag is not None
        if diag is None or not self.is_mounted:
            return
        for severity in ICONS:
            self.set_class(diag.severity == severity, f"-{severity}")
        icon = ICONS.get(diag.severity, "✗")
        title = diag.title or diag.kind.replace("_", " ")
        self.query_one("#diag-title", Static).update(Text(f"{icon} {title}", style="bold"))
        self.query_one("#diag-tags", Static).update(tags_text(diag))
        count = Text(f"{self.index + 1} of {len(self.diagnoses)}", style="bold")
        self.query_one("#diag-count", Static).update(count)
        self.query_one("#diag-message", Static).update(Text(diag.message))
        related = self.query_one("#diag-related", Static)
        related.display = bool(diag.related)
        related.update(related_text(diag.related))
