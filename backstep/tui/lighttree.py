"""A Tree that measures its rows without rendering them.

Textual's Tree rebuilds its line list whenever a node is added or opened, and measures every
open row by rendering its label (a copy, a restyle and an assembly each). On a module open under
a 10k-node graph that is thousands of rows per step; the width is just the label's cells plus
the fold icon's.
"""

from __future__ import annotations

from typing import TypeVar

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

T = TypeVar("T")


class LightTree(Tree[T]):
    """``Tree`` with a cheap ``get_label_width`` (same result as rendering the label)."""

    def get_label_width(self, node: TreeNode[T]) -> int:
        label = node.label
        width = label.cell_len if isinstance(label, Text) else cell_len(str(label))
        if node.allow_expand:
            icon = self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE
            width += cell_len(icon)
        return width
