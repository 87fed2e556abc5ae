"""The graph panel: the pass's grad_fn graph as a shallow, lazily built Tree.

``GraphLayout`` decides the shape (heavy paths, chunks, links); this widget only materialises
the containers someone opens and keeps the labels' status glyphs in step with the snapshots.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from backstep.tui.panels.status import live_passes
from backstep.tui.state.graphlayout import TOP, GraphLayout, Key, Row, layout_of
from backstep.tui.state.snapshot import PassView, Snapshot
from backstep.tui.text.edited import graph_title
from backstep.tui.text.fit import cut_middle, name_and_leaf
from backstep.tui.text.format import GLYPHS, cut_left
from backstep.tui.text.region import RegionOp, group_label, op_label
from backstep.tui.widgets.lighttree import LightTree
from backstep.tui.widgets.titles import set_subtitle

OPEN_ALL_BELOW = 200  # graphs this small start fully open
MIN_NAME = 10  # a module path is shown, cut from the left, only when this many cells are left


class GraphPanel(LightTree[Row]):
    """Every node of the pass once, with a done / current / pending / skipped glyph."""

    ICON_NODE = "+ "
    ICON_NODE_EXPANDED = "− "

    @dataclass
    class NodeChosen(Message):
        """The person moved the cursor onto a node (or a link to one)."""

        node: int

    @dataclass
    class OpChosen(Message):
        """The cursor is on one op of a compiled region (its forward line goes to Source)."""

        node: int
        op: RegionOp

    def __init__(self, **kwargs: object) -> None:
        super().__init__("graph", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.guide_depth = 2
        self.border_title = "Graph"
        self.layout_: GraphLayout | None = None
        self._view: PassView | None = None
        self._current: int | None = None
        self._rows: dict[int, TreeNode[Row]] = {}
        self._containers: dict[Key, TreeNode[Row] | None] = {}
        self._loaded: set[Key] = set()
        self._regions = 0  # compiled regions known when the tree was built
        self._width: tuple[int, int] | None = None  # content width and scrollbar, in a batch

    # -- building -------------------------------------------------------------------------

    def show(self, snapshot: Snapshot) -> None:
        """Bring the tree up to date with a snapshot (rebuilds only when the pass changes)."""
        set_subtitle(self, live_passes(snapshot, self.size.width))
        view = snapshot.pass_
        if view is None:
            return
        previous = self._view
        old_current = self._current
        self._current = snapshot.current
        self._view = view
        if previous is None or previous.number != view.number or previous.graph is not view.graph \
                or len(view.log.regions) != self._regions:
            self._rebuild(view)  # a compiled region's ops came after the graph: they fold in
            return
        if view.edits != previous.edits:
            self.border_title = graph_title(view)
        # the nodes run since the last snapshot, or, stepped back (a replay's [, C, g), those
        # that had run and have not at this one
        if view.done >= previous.done:
            changed: set[int] = set(view.executed()[previous.done :])
        else:
            changed = set(previous.executed()[view.done :])
        changed.update(i for i in (old_current, self._current) if i is not None)
        if view.ended != previous.ended:
            changed = set(self._rows)
        for node_id in changed:
            tree_node = self._rows.get(node_id)
            if tree_node is not None:
                tree_node.set_label(self._label(tree_node.data, self._indent(tree_node.parent)))

    def _rebuild(self, view: PassView) -> None:
        self._regions = len(view.log.regions)
        self.clear()
        self.layout_ = layout_of(view.graph)
        self._rows.clear()
        self._containers = {TOP: None}
        self._loaded.clear()
        self.border_title = graph_title(view)
        with self._adding():
            self._load(TOP)

    def _load(self, key: Key) -> None:
        """Add a container's rows the first time it is opened."""
        if key in self._loaded or self.layout_ is None:
            return
        parent = self._containers.get(key) if key != TOP else self.root
        if parent is None:
            return
        self._loaded.add(key)
        indent = self._indent(parent)
        for row in self._rows_of(key):
            label = self._label(row, indent)
            if row.key is None:
                child = parent.add_leaf(label, row)
            else:
                child = parent.add(label, row)
                self._containers[row.key] = child
            if row.kind == "node":
                self._rows[row.node] = child
            if row.key is not None and row.kind not in ("chunk", "region") and self._small():
                self._load(row.key)  # small graphs open fully; depth stays logarithmic
                child.expand()

    def _rows_of(self, key: Key) -> list[Row]:
        """A container's rows; a compiled region's node opens on its group of ops first (a
        folded row of their own: they ran as one fused call, not one by one)."""
        assert self.layout_ is not None
        regions = self._view.log.regions if self._view is not None else {}
        if key[0] == "region":
            found = regions.get(key[1])
            return [Row("op", key[1], count=i) for i in range(len(found.ops))] if found else []
        rows = self.layout_.rows(key)
        if key[0] == "node" and key[1] in regions:
            found = regions[key[1]]
            rows.insert(0, Row("region", key[1], ("region", key[1], 0) if found.ops else None,
                               len(found.ops)))
        return [Row("node", r.node, ("node", r.node, 0)) if r.kind == "node" and r.key is None
                and r.node in regions else r for r in rows]

    def _small(self) -> bool:
        return self._view is not None and len(self._view.graph.nodes) <= OPEN_ALL_BELOW

    def _label(self, row: Row | None, indent: int = 0) -> Text:
        if row is None or self._view is None:
            return Text("")
        if row.kind in ("region", "op"):
            found = self._view.log.regions.get(row.node)
            if found is None:
                return Text("")
            text = group_label(found) if row.kind == "region" else \
                op_label(found.ops[row.count], row.count)
            text.truncate(max(self._room(row, indent), 8), overflow="ellipsis")
            return text
        info = self._view.graph.nodes.get(row.node)
        name = info.name if info else "?"
        if row.kind == "path":
            return self._branch_label(row, name, self._room(row, indent) - 2)
        if row.kind == "link":  # fitted like a node's row: the tail goes, then the name is
            # cut in the middle
            room = self._room(row, indent) - 2
            tail = f" #{row.node}"
            if len(name) + len(tail) > room:
                tail = ""
            if len(name) + len(tail) > room:
                name = cut_middle(name, max(room - len(tail), 6))
            return Text.assemble(("↪ ", "cyan"), (name, "cyan"), (tail, "dim"))
        if row.kind == "chunk":
            assert self.layout_ is not None
            head = self.layout_.head[row.node]
            first = self.layout_.position[row.node] + 1
            last_name = self._view.graph.nodes[row.last].name if row.last is not None else "?"
            return Text.assemble(
                ("⋯ ", "blue"),
                (f"{first}–{first + row.count - 1} ", "dim"),
                (f"{name} … {last_name}", ""),
                (f"  of {len(self.layout_.paths[head])}", "dim"),
            )
        state = self._view.state(row.node, self._current)
        glyph, style = GLYPHS[state]
        text = Text.assemble((glyph + " ", style))
        line = ""
        if info is not None and info.source and isinstance(info.source.get("line"), int):
            line = f" :{info.source['line']}"
        # the row's cells go to the name and its leaf, then the module path, then the #id, then
        # the source line: a narrow row drops the line, then the id (both are in the Source and
        # Gradients panels), then cuts the leaf and module path from the left (their tail is
        # the informative part), then cuts the name in the middle; a row is never wider than
        # the panel, so nothing is cut at the right
        mark = " ⇄" if info is not None and info.comm else ""  # communication happens here
        room = self._room(row, indent) - len(glyph) - 1 - len(mark)
        leaf = info.leaf if info is not None else None
        if leaf:
            name, leaf = name_and_leaf(name, leaf, room)
            room -= len(name) + 1 + len(leaf)
        else:
            if len(name) > room:
                name = cut_middle(name, max(room, 6))
            room -= len(name)
        module = f" {info.module}" if info is not None and info.module else ""
        node_id = f" #{row.node}"
        if room < len(module) + len(node_id) + len(line):
            line = ""
        if room < len(module) + len(node_id):
            node_id = ""
        if len(module) > room:
            module = f" {cut_left(module[1:], room - 1)}" if room > MIN_NAME else ""
        if not module and not line and room >= len(f" #{row.node}"):
            node_id = f" #{row.node}"  # no module to make room for: the id fits
        text.append(name, style="bold reverse" if state == "current" else "")
        text.append(mark, style="bold magenta")
        if leaf:
            text.append(f" {leaf}", style="green")
        text.append(node_id, style="dim")
        text.append(module, style="dim cyan")
        text.append(line, style="dim")
        return text

    def _branch_label(self, row: Row, name: str, room: int) -> Text:
        """A branch's row: its head's name and ``#id``, module path and source line, and
        the nodes it folds. The rows of an unrolled loop's branches share the name, module
        and line (one per time step, 19 alike after a search), so the id, which tells them
        apart, stays: the words "more", the line, then the module give way first, then the
        name is cut in the middle."""
        assert self._view is not None
        info = self._view.graph.nodes.get(row.node)
        node_id = f" #{row.node}"
        module = f" {info.module}" if info is not None and info.module else ""
        line = ""
        if info is not None and info.source and isinstance(info.source.get("line"), int):
            line = f" :{info.source['line']}"
        more = f"  +{row.count - 1} more"
        if len(name) + len(node_id) + len(module) + len(line) + len(more) > room:
            more = f" +{row.count - 1}"
        if len(name) + len(node_id) + len(module) + len(line) + len(more) > room:
            line = ""
        rest = room - len(name) - len(node_id) - len(more)
        if len(module) > rest:
            module = f" {cut_left(module[1:], rest - 1)}" if rest > MIN_NAME else ""
        if len(name) + len(node_id) + len(more) > room:
            name = cut_middle(name, max(room - len(node_id) - len(more), 6))
        return Text.assemble(("⑂ ", "blue"), (name, ""), (node_id, "dim"),
                             (module, "dim cyan"), (line, "dim"), (more, "dim"))

    def _room(self, row: Row, indent: int) -> int:
        """The cells a row's label may take without running past the panel (a vertical
        scrollbar's room kept, as it may appear later); a lot when not laid out yet."""
        if self._width is not None:  # inside a batch: the panel's size cannot change
            width, scrollbar = self._width
        else:
            width, scrollbar = self.content_region.width, self.styles.scrollbar_size_vertical
        if not width:
            return 10**6
        icon = 2 if row.key is not None else 0  # the fold icon of a row that opens
        # ``indent`` counts a level for the hidden root, which draws no guide
        return width - scrollbar - (indent - self.guide_depth) - icon

    @contextmanager
    def _adding(self) -> Iterator[None]:
        """Rows added and opened inside: one invalidation at the end (``batch``), and the
        panel's width looked up once for all their labels."""
        self._width = (self.content_region.width, self.styles.scrollbar_size_vertical)
        try:
            with self.batch():
                yield
        finally:
            self._width = None

    def _indent(self, parent: TreeNode[Row] | None) -> int:
        """The cells of guides before a child of ``parent`` (the tree is shallow: cheap)."""
        depth = 0
        while parent is not None and parent is not self.root:
            depth += 1
            parent = parent.parent
        return (depth + 1) * self.guide_depth

    def on_resize(self) -> None:
        """Re-cut the names of the rows built so far (nodes, links, paths) to the new width."""
        stack = [(child, self.guide_depth) for child in self.root.children]
        while stack:
            tree_node, indent = stack.pop()
            tree_node.set_label(self._label(tree_node.data, indent))
            stack.extend((child, indent + self.guide_depth) for child in tree_node.children)

    # -- navigation -----------------------------------------------------------------------

    def reveal(self, node_id: int, move: bool = True) -> None:
        """Open what hides the node's row and, by default, put the cursor on it."""
        if self.layout_ is None or node_id not in self.layout_.head:
            return
        with self._adding():
            for key in self.layout_.reveal(node_id):
                self._load(key)
                container = self._containers.get(key)
                if container is not None and not container.is_expanded:
                    container.expand()
        row = self._rows.get(node_id)
        if row is not None and move:
            self._tree_lines  # noqa: B018 - rebuild line numbers so the cursor lands right
            self.move_cursor(row)
            self.scroll_to_node(row, animate=False)

    @on(Tree.NodeExpanded)
    def _expanded(self, event: Tree.NodeExpanded[Row]) -> None:
        row = event.node.data
        if row is not None and row.key is not None:
            with self._adding():
                self._load(row.key)

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event: Tree.NodeHighlighted[Row]) -> None:
        event.stop()
        row = event.node.data
        if row is not None and row.kind in ("node", "link"):
            self.post_message(self.NodeChosen(row.node))
        elif row is not None and row.kind == "op" and self._view is not None:
            found = self._view.log.regions.get(row.node)
            if found is not None:
                self.post_message(self.OpChosen(row.node, found.ops[row.count]))

    @on(Tree.NodeSelected)
    def _selected(self, event: Tree.NodeSelected[Row]) -> None:
        event.stop()
        row = event.node.data
        if row is not None and row.kind == "link":
            self.reveal(row.node)
            self.post_message(self.NodeChosen(row.node))
