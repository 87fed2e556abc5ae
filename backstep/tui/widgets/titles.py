"""Border titles that repaint a panel only when they change, and read as plain text.

Textual repaints the whole widget whenever ``border_title`` or ``border_subtitle`` is assigned,
even to the same text, and the panels set theirs on every step: on a tall tree that is every
visible row re-rendered for nothing. A title names a node, a module or a file from the trace,
and Textual reads a ``str`` title as markup (``A[/]`` raised MarkupError): each is set as
``Content``, shown as it reads, its control characters made visible.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

from backstep import safe_text


def set_title(widget: Widget, title: str) -> None:
    """``widget.border_title = title`` (plain text), skipped when it already reads so."""
    content = Content(safe_text.printable(title))
    if widget.border_title != content.markup:
        widget.border_title = content


def set_subtitle(widget: Widget, subtitle: str) -> None:
    """``widget.border_subtitle = subtitle`` (plain text), skipped when it already reads so."""
    content = Content(safe_text.printable(subtitle))
    if widget.border_subtitle != content.markup:
        widget.border_subtitle = content
