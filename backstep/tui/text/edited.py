"""How a pass the person edited is marked: the same words in the same colour in the status line
and the graph's title, a colour nothing else on screen uses, so a gradient that is not the
program's own is never mistaken for one."""

from __future__ import annotations

from textual.content import Content

from backstep.tui.state.snapshot import PassView

EDITED_WORDS = " edited by you "
EDITED_STYLE = "bold black on dark_orange"


def graph_title(view: PassView) -> Content:
    """The graph panel's title: the pass and its size, after the mark once it was edited (first:
    a narrow panel cuts its title at the right)."""
    n = len(view.graph.nodes)
    title = Content(f"Graph · pass {view.number} · {n} node{'s' if n != 1 else ''}")
    if not view.edits:
        return title
    return Content.assemble((EDITED_WORDS, EDITED_STYLE), " ", title)
