"""The help screen: the keys, pdb-style, made from the app's bindings.

Each of the app's ``Binding``s documents itself in its tooltip (a session's driver may say
otherwise in its ``key_help``, by action); keys with the same words share a row. The few keys
that Textual's widgets handle with no binding of ours (``UNBOUND``) are listed after the key
named by their ``after``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.keys import key_to_character
from textual.screen import ModalScreen
from textual.widgets import Static

# (id, key, what it does, listed after the binding of this action); a driver's ``key_help``
# may say otherwise by the id
UNBOUND = (
    ("open_tensor", "enter", "on a gradient: open the tensor view (values fetched on demand)",
     "break_dialog"),
    ("focus", "tab", "move between panels; arrows move in the graph", "break_dialog"),
    ("click", "click", "a node selects it; a gradient opens the tensor view; a module folds / "
     "unfolds", "break_dialog"),
)


NAMES = {"slash": "/"}  # keys Textual names but gives no character for


def key_name(key: str) -> str:
    """How the help (and the README) writes a key: ``[`` for left_square_bracket."""
    char = NAMES.get(key) or key_to_character(key)
    return char if char is not None and char.isprintable() else key


def key_label(binding: Binding) -> str:
    """A binding's key as its help row shows it (its ``key_display``, where it has one)."""
    return binding.key_display or key_name(binding.key)


def help_rows(bindings: Iterable[Binding], key_help: Mapping[str, str],
              offers: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(key, what) rows for the keys ``offers`` says are bound; a second line of a key's words
    is a row of its own with no key."""
    entries: list[tuple[str, str]] = []  # (label, words), one per row group

    def add(label: str, action: str, words: str) -> None:
        words = key_help.get(action, words)
        if not words:
            return
        for i, (had, same) in enumerate(entries):
            if same == words:
                entries[i] = (f"{had} / {label}", same)
                return
        entries.append((label, words))

    for binding in bindings:
        if not offers(binding.action):
            continue
        add(key_label(binding), binding.action, binding.tooltip)
        for ident, key, words, after in UNBOUND:
            if after == binding.action:
                add(key, ident, words)
    rows: list[tuple[str, str]] = []
    for label, words in entries:
        first, *more = words.split("\n")
        rows.append((label, first))
        rows.extend(("", line) for line in more)
    return rows


def keys_table(rows: Iterable[tuple[str, str]]) -> Table:
    table = Table(box=None, padding=(0, 2), show_header=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for key, what in rows:
        table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """A modal list of the keys; any of escape, q or ? closes it. The list scrolls with the
    arrow and page keys where the terminal is shorter than it (it is focused on open)."""

    BINDINGS = [
        Binding("escape", "dismiss", "close"),
        Binding("q", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close"),
    ]

    def __init__(self, rows: list[tuple[str, str]], title: str = "backstep — keys") -> None:
        super().__init__()
        self.rows = rows
        self.heading = title

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(self.heading, id="help-title")
            yield Static(keys_table(self.rows))
            yield Static("up / down, page up / down scroll · escape closes", classes="dim-hint")
