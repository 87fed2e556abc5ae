"""Search (``/``): find nodes by part of their name, module path or leaf name.

The bar has two states. Typing: the Input has the keys, enter selects the next match and hands
the keys back to the graph. Browsing: the bar stays up saying ``2/7``, and ``n`` / ``N`` go to the
next / previous match instead of stepping; escape leaves search and ``n`` steps again.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Static

from backstep.tui.state.records import Graph


def matches(graph: Graph, query: str) -> list[int]:
    """The ids of the nodes whose name, module path or leaf name contains ``query`` (any case),
    in the graph's order."""
    needle = query.strip().lower()
    if not needle:
        return []
    found = []
    for node_id in graph.order:
        info = graph.nodes[node_id]
        if needle in info.name.lower() or (info.module and needle in info.module.lower()) \
                or (info.leaf and needle in info.leaf.lower()):
            found.append(node_id)
    return found


def pick(found: list[int], current: int | None, step: int) -> int | None:
    """The match after (``step`` 1) or before (-1) ``current`` in graph order, wrapping round;
    the first (or last) when ``current`` is not a match."""
    if not found:
        return None
    if current in found:
        return found[(found.index(current) + step) % len(found)]
    return found[0] if step > 0 else found[-1]


class SearchBar(Horizontal):
    """A one-line bar above the status line, hidden until ``/``."""

    @dataclass
    class Go(Message):
        """Select the next match (enter in the Input)."""

        query: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.input = Input(placeholder="node name, module path or leaf name", id="search-input")
        self.info = Static("", id="search-info")

    def compose(self) -> ComposeResult:
        yield Static("/", id="search-prompt")
        yield self.input
        yield self.info

    @property
    def query(self) -> str:
        return self.input.value

    def open(self) -> None:
        self.display = True
        self.info.update(Text("enter: next match · esc: leave", style="dim"))
        self.input.focus()

    def close(self) -> None:
        self.display = False

    def browse(self, label: str) -> None:
        """Up without the keys: n / N go through nodes chosen elsewhere (a memory row's), the
        bar showing ``label`` (``/`` then edits it as a query)."""
        self.display = True
        self.input.value = label

    def tell(self, found: list[int], chosen: int | None) -> None:
        """Say where the selection is among the matches, and which keys move."""
        if not found:
            self.info.update(Text("no match", style="bold red"))
            return
        where = found.index(chosen) + 1 if chosen in found else 0
        self.info.update(Text.assemble((f"{where}/{len(found)}", "bold"),
                                       ("  n/N next/previous · / edit · esc leave", "dim")))

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Go(event.value))
