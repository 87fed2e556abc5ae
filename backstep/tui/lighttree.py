"""A Tree that measures its rows without rendering them, and lays the screen out only when
its size changes.

Textual's Tree rebuilds its line list whenever a node is added or opened, and measures every
open row by rendering its label (a copy, a restyle and an assembly each). On a module open under
a 10k-node graph that is thousands of rows per step; the width is just the label's cells plus
the fold icon's. Each added or opened node also asks for a layout of the whole screen (10-16 ms
on a 140x42 screen), though the tree's box is set by the stylesheet: only a change of its
virtual size (scrollbars) needs one, and setting ``virtual_size`` asks for it then. Rows added
or opened in a ``batch()`` invalidate once at its end (a pass change adds a hundred at once), and
a frame works out the widget's style once, not once per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

T = TypeVar("T")


class LightTree(Tree[T]):
    """``Tree`` with a cheap ``get_label_width`` (same result as rendering the label), and a
    repaint instead of a layout when its nodes change."""

    _batching = 0  # inside batch(): invalidations wait for its end
    _missed = False  # an invalidation waited
    _frame_style: Style | None = None  # the widget's style, worked out once per frame

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Add and open rows, invalidating the tree once at the end (read no rows inside)."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching and self._missed:
                self._missed = False
                self._invalidate()

    def _invalidate(self) -> None:
        if self._batching:
            self._missed = True
            return
        self._clear_line_cache()
        self._updates += 1
        self.root._reset()
        self.refresh()  # the rebuild sets virtual_size, which lays out when it changed

    def get_label_width(self, node: TreeNode[T]) -> int:
        label = node.label
        width = label.cell_len if isinstance(label, Text) else cell_len(str(label))
        if node.allow_expand:
            icon = self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE
            width += cell_len(icon)
        return width

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None

    def render_line(self, y: int) -> Strip:
        """``Tree.render_line`` with the style worked out once per frame (``rich_style`` walks
        every ancestor's styles)."""
        style = self._frame_style
        if style is None:
            style = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        return self._render_line(y + scroll_y, scroll_x, scroll_x + self.size.width, style)
