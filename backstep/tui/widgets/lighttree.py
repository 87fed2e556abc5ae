"""A Tree that measures its rows without rendering them, and lays the screen out only when
its size changes.

Textual's Tree rebuilds its line list whenever a node is added or opened, and measures every
open row by rendering its label (a copy, a restyle and an assembly each). On a module open under
a 10k-node graph that is thousands of rows per step; the width is just the label's cells plus
the fold icon's. Each added or opened node also asks for a layout of the whole screen (10-16 ms
on a 140x42 screen), though the tree's box is set by the stylesheet: only a change of its
virtual size (scrollbars) needs one, and setting ``virtual_size`` asks for it then. Rows added
or opened in a ``batch()`` invalidate once at its end (a pass change adds a hundred at once), and
a frame works out the widget's style, and its guides' and labels' component styles, once, not
once per row, and a row's segments are made directly from its label's (``_render_line`` draws
what ``Tree._render_line`` drew, strip for strip, but never calls ``render_label``: a subclass
changes a row through its label).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._segment_tools import line_pad
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets._tree import TOGGLE_STYLE, _TreeLine
from textual.widgets.tree import TreeNode

T = TypeVar("T")


class LightTree(Tree[T]):
    """``Tree`` with a cheap ``get_label_width`` (same result as rendering the label), and a
    repaint instead of a layout when its nodes change."""

    _batching = 0  # inside batch(): invalidations wait for its end
    _missed = False  # an invalidation waited
    _frame_style: Style | None = None  # the widget's style, worked out once per frame
    _frame_parts: dict[str, Any] | None = None  # the component styles, once per frame

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

    def clear(self) -> LightTree[T]:
        """``Tree.clear``, leaving no reference cycles behind: a node and its children point at
        each other, so a cleared tree's nodes (and every label and row they hold) waited for the
        garbage collector, a hundred nodes a pass change; taken apart first, they go at once."""
        with self.batch():
            self.root.remove_children()
        super().clear()
        return self

    def _clear_line_cache(self) -> None:
        """Drop the drawn rows, freed at once: Textual's LRU cache is a ring of links, which a
        plain clear leaves for the garbage collector with every row's strip in it (~3,000
        objects a pass change, most of what made each young collection take 25 ms)."""
        links = getattr(self._line_cache, "_cache", None)
        if isinstance(links, dict):
            for link in links.values():
                link.clear()
        super()._clear_line_cache()

    def _invalidate(self) -> None:
        if self._batching:
            self._missed = True
            return
        self._clear_line_cache()
        self._updates += 1
        self.root._reset()
        self.refresh()  # the rebuild sets virtual_size, which lays out when it changed

    def process_label(self, label: str | Text) -> Text:
        """``Tree.process_label`` (a label's first line) without its copy of a one-line
        ``Text``: the tree only reads a label (it draws a copy), and a new one replaces it. A
        ``str`` is plain text, not markup: labels are names from the trace (``[/]`` is one)."""
        if isinstance(label, str):
            label = Text(label)
        if "\n" not in label.plain:
            return label
        return super().process_label(label)

    def _build(self) -> None:
        """``Tree._build`` without its recursive closure: a nested function that calls itself
        is a reference cycle, and it held the line list it built (every row's path of nodes)
        until the garbage collector came, a whole list every rebuild. The same lines, in the
        same order, with the same widths."""
        lines: list[_TreeLine[T]] = []
        starts = [self.root] if self.show_root else self.root._children
        # depth first, children in order: the last child of each node is marked last (the top
        # rows all are, as Tree marks them when the root is hidden)
        stack: list[tuple[list[TreeNode[T]], TreeNode[T], bool]] = [
            ([], node, True) for node in reversed(starts)]
        while stack:
            path, node, last = stack.pop()
            child_path = [*path, node]
            node._line = len(lines)
            lines.append(_TreeLine(child_path, last))
            if node._expanded and node._children:
                children = node._children
                final = len(children) - 1
                stack.extend((child_path, child, i == final)
                             for i, child in reversed(list(enumerate(children))))
        self._tree_lines_cached = lines
        depth, show_root = self.guide_depth, self.show_root
        width = max((self.get_label_width(line.node) + line._get_guide_width(depth, show_root)
                     for line in lines), default=self.size.width)
        self.virtual_size = Size(width, len(lines))
        if self.cursor_line != -1:
            if self.cursor_node is not None:
                self.cursor_line = self.cursor_node._line
            if self.cursor_line >= len(lines):
                self.cursor_line = -1

    def get_label_width(self, node: TreeNode[T]) -> int:
        label = node.label
        width = label.cell_len if isinstance(label, Text) else cell_len(str(label))
        if node.allow_expand:
            icon = self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE
            width += cell_len(icon)
        return width

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame_style = self.rich_style
        self._frame_parts = None
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = self._frame_parts = None

    def render_line(self, y: int) -> Strip:
        """``Tree.render_line`` with the style worked out once per frame (``rich_style`` walks
        every ancestor's styles)."""
        style = self._frame_style
        if style is None:
            style = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        return self._render_line(y + scroll_y, scroll_x, scroll_x + self.size.width, style)

    def _parts(self) -> dict[str, Any]:
        """What ``Tree._render_line`` works out for every row: the same for all rows of a
        frame (the pseudo-classes and focus do not change while it is drawn)."""
        parts = self._frame_parts
        if parts is not None:
            return parts
        rich = self.get_component_rich_style
        base = rich("tree--guides", partial=True)
        parts = {
            "base_hidden": self.get_component_styles("tree--guides").color.a == 0,
            "hover_hidden": self.get_component_styles("tree--guides-hover").color.a == 0,
            "selected_hidden": self.get_component_styles("tree--guides-selected").color.a == 0,
            "base": base,
            "hover": base + rich("tree--guides-hover", partial=True),
            "selected": base + rich("tree--guides-selected", partial=True),
            "guides": {},
            "focus": self.has_focus,
            "label": rich("tree--label", partial=True),
            "highlight": rich("tree--highlight", partial=True),
            "cursor": rich("tree--cursor", partial=False),
        }
        if self._frame_style is not None:
            self._frame_parts = parts
        return parts

    def _guides(self, parts: dict[str, Any], style: Style, hidden: bool) -> tuple[str, ...]:
        """``Tree._render_line``'s ``get_guides``, kept per style for the frame."""
        found = parts["guides"].get((style, hidden))
        if found is None:
            if self.show_guides and not hidden:
                lines = self.LINES["default"]
                if style.bold:
                    lines = self.LINES["bold"]
                elif style.underline2:
                    lines = self.LINES["double"]
            else:
                lines = ("  ", "  ", "  ", "  ")
            depth = max(0, self.guide_depth - 2)
            found = parts["guides"][(style, hidden)] = tuple(
                f"{chars[0]}{chars[1] * depth} " for chars in lines)
        return found

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """``Tree._render_line``, its segments made directly: each guide in the line's style
        and the guide's, the fold icon with the toggle's, the label's own segments between the
        line's style and the label's component style (what rich made of the assembled text,
        without assembling it: a copy, two restyles and a join a row, half of drawing one)."""
        tree_lines = self._tree_lines
        width = self.size.width
        if y >= len(tree_lines):
            return Strip.blank(width, base_style)
        line = tree_lines[y]
        is_hover = self.hover_line >= 0 and any(node._hover for node in line.path)
        cache_key = (y, is_hover, width, self._updates, self._pseudo_class_state,
                     tuple(node._updates for node in line.path))
        if cache_key in self._line_cache:
            return self._line_cache[cache_key].crop(x1, x2)
        parts = self._parts()
        focus = parts["focus"]
        hover = line.path[0]._hover
        selected = line.path[0]._selected and focus
        if is_hover:
            line_style = self.get_component_rich_style("tree--highlight-line")
        else:
            line_style = base_style
        line_style += Style(meta={"line": y})
        segments: list[Segment] = []
        cells = 0
        guide_style = parts["base"]
        hidden = True
        last = line.path[-1]
        for node in line.path[1:]:
            hidden = parts["base_hidden"]
            if hover:
                guide_style, hidden = parts["hover"], parts["hover_hidden"]
            if selected:
                guide_style, hidden = parts["selected"], parts["selected_hidden"]
            space, vertical, _, _ = self._guides(parts, guide_style, hidden)
            if node != last:
                guide = space if node.is_last else vertical
                segments.append(Segment(guide, line_style + guide_style))
                cells += cell_len(guide)
            hover = hover or node._hover
            selected = (selected or node._selected) and focus
        if len(line.path) > 1:
            _, _, terminator, cross = self._guides(parts, guide_style, hidden)
            guide = terminator if line.last else cross
            segments.append(Segment(guide, line_style + guide_style))
            cells += cell_len(guide)
        label_style = parts["label"]
        if self.hover_line == y:
            label_style += parts["highlight"]
        if self.cursor_line == y:
            label_style += parts["cursor"]
        node_meta = Style(meta={"node": last._id})
        if last._allow_expand:
            icon = self.ICON_NODE_EXPANDED if last.is_expanded else self.ICON_NODE
            segments.append(Segment(icon, line_style + TOGGLE_STYLE + node_meta))
            cells += cell_len(icon)
        label = last._label
        console = self.app.console
        own = console.get_style(label.style, default=Style.null()) if label.style else None
        drawn = label.render(console) if label.spans else [Segment(label.plain, own)]
        segments.extend(Segment.apply_style(drawn, line_style, label_style + node_meta))
        cells += label.cell_len
        pad_width = max(self.virtual_size.width, width)
        segments = line_pad(segments, 0, pad_width - cells, line_style)
        # the strip's width given, not summed segment by segment again by the crop
        strip = self._line_cache[cache_key] = Strip(segments, max(pad_width, cells))
        return strip.crop(x1, x2)
