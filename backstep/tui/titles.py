"""Border titles that repaint a panel only when they change.

Textual repaints the whole widget whenever ``border_title`` or ``border_subtitle`` is assigned,
even to the same text, and the panels set theirs on every step: on a tall tree that is every
visible row re-rendered for nothing.
"""

from __future__ import annotations

from textual.widget import Widget


def set_title(widget: Widget, title: str) -> None:
    """``widget.border_title = title``, skipped when it already reads so."""
    if widget.border_title != title:
        widget.border_title = title


def set_subtitle(widget: Widget, subtitle: str) -> None:
    """``widget.border_subtitle = subtitle``, skipped when it already reads so."""
    if widget.border_subtitle != subtitle:
        widget.border_subtitle = subtitle
