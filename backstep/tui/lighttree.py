"""A Tree that measures its rows without rendering them, and lays the screen out only when
its size changes.

Textual's Tree rebuilds its line list whenever a node is added or opened, and measures every
open row by rendering its label (a copy, a restyle and an assembly each). On a module open under
a 10k-node graph that is thousands of rows per step; the width is just the label's cells plus
the fold icon's. Each added or opened node also asks for a layout of the whole screen (10-16 ms
on a 140x42 screen), though the tree's box is set by the stylesheet: only a change of its
virtual size (scrollbars) needs one, and setting ``virtual_size`` asks for it then.
"""

from __future__ import annotations

from typing import TypeVar

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

T = TypeVar("T")


class LightTree(Tree[T]):
    """``Tree`` with a cheap ``get_label_width`` (same result as rendering the label), and a
    repaint instead of a layout when its nodes change."""

    def _invalidate(self) -> None:
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
