"""The module view of the graph (``m``): nodes folded under their module path, one row per
module with its done / pending counts, its largest gradient norm and a ✗ if a node in it
produced NaN/Inf.

Built lazily like the graph panel: a module's rows are added the first time it is opened, so a
10k-node graph costs one level of rows to show. Module paths are shallow (``h.3.attn``), so the
tree never nests deeper than the model does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from backstep.tui.panels.graph import GraphPanel
from backstep.tui.state.records import NodeInfo, number
from backstep.tui.state.snapshot import PassView, Snapshot
from backstep.tui.text.fit import cut_middle, name_and_leaf
from backstep.tui.text.format import GLYPHS, cut_left, num
from backstep.tui.widgets.lighttree import LightTree
from backstep.tui.widgets.titles import set_subtitle, set_title

NO_MODULE = "(no module)"


@dataclass
class Module:
    """One module path: its child modules and the nodes created directly in it."""

    path: tuple[str, ...]
    children: dict[str, Module] = field(default_factory=dict)
    nodes: list[int] = field(default_factory=list)
    all_nodes: list[int] = field(default_factory=list)  # the subtree's, for the counts


def module_parts(module: str | None) -> tuple[str, ...]:
    """``model.transformer.h.3.attn`` -> (model, transformer, h.3, attn): an index belongs to
    its container's name."""
    if not module:
        return (NO_MODULE,)
    parts: list[str] = []
    for part in module.split("."):
        if part.isdigit() and parts:
            parts[-1] += "." + part
        else:
            parts.append(part)
    return tuple(parts)


def node_module(info: NodeInfo) -> tuple[str, ...]:
    """Where a node folds: its module, or for a leaf's AccumulateGrad the module that owns
    the parameter (``h.0.ln_2.weight`` -> ``h.0.ln_2``)."""
    if info.module is None and info.leaf and "." in info.leaf:
        return module_parts(info.leaf.rsplit(".", 1)[0])
    return module_parts(info.module)


def build_modules(view: PassView) -> Module:
    """The module tree of a pass's graph, nodes in graph order."""
    root = Module(())
    for node_id in view.graph.order:
        info = view.graph.nodes[node_id]
        parts = node_module(info)
        mod = root
        mod.all_nodes.append(node_id)
        for i, part in enumerate(parts):
            mod = mod.children.setdefault(part, Module(parts[: i + 1]))
            mod.all_nodes.append(node_id)
        mod.nodes.append(node_id)
    if NO_MODULE in root.children:  # the unplaced nodes last
        root.children[NO_MODULE] = root.children.pop(NO_MODULE)
    return root


@dataclass(frozen=True)
class Stats:
    done: int
    pending: int
    norm: float | None
    nonfinite: bool


def node_stats(view: PassView, node_id: int) -> tuple[float | None, bool] | None:
    """A node that ran: the largest finite gradient norm in or out of it, and NaN/Inf;
    None while it has not run."""
    rec = view.record(node_id)
    if rec is None:
        return None
    top: float | None = None
    bad = bool(rec.error)
    for s in (*(rec.grad_inputs or ()), *rec.grad_outputs):
        if s is None:
            continue
        if s.get("nonfinite"):
            bad = True
        norm = number(s.get("norm"))
        if norm is not None and math.isfinite(norm):
            top = norm if top is None else max(top, norm)
        elif norm is not None:
            bad = True
    return top, bad


Row = tuple[str, tuple[str, ...] | int]  # ("module", path) or ("node", id)


class ModulePanel(LightTree[Row]):
    """The graph by module path; right / left unfold and fold, enter toggles."""

    BINDINGS = [
        Binding("right", "unfold", "unfold", show=False),
        Binding("left", "fold", "fold", show=False),
    ]

    def __init__(self, **kwargs: object) -> None:
        super().__init__("modules", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.guide_depth = 2
        self.border_title = "Modules"
        self._view: PassView | None = None
        self._current: int | None = None
        self._root: Module | None = None
        self._mods: dict[tuple[str, ...], TreeNode[Row]] = {}
        self._rows: dict[int, TreeNode[Row]] = {}
        self._loaded: set[tuple[str, ...]] = set()
        # per module path, folded in as nodes run (a step costs its node's depth, not the graph)
        self._stats: dict[tuple[str, ...], Stats] = {}
        self._counted = 0

    def show(self, snapshot: Snapshot) -> None:
        view = snapshot.pass_
        if view is None:
            return
        previous, old_current = self._view, self._current
        self._view, self._current = view, snapshot.current
        if previous is None or previous.graph is not view.graph:
            self.clear()
            self._root = build_modules(view)
            self._mods = {(): self.root}
            self._rows.clear()
            self._loaded.clear()
            self._stats.clear()
            self._counted = 0
            set_title(self, f"Modules · pass {view.number}")
            self._count(view)
            self._load(self._root)
        else:  # relabel the open modules (few) and the node rows that changed
            changed = set(view.executed()[self._counted :])
            changed.update(i for i in (old_current, self._current) if i is not None)
            if view.ended and not previous.ended:
                changed = set(self._rows)
            for path in self._count(view):  # only the modules whose counts moved
                tree_node = self._mods.get(path)
                if tree_node is not None:
                    tree_node.set_label(self._module_label(tree_node))
            for node_id in changed:
                if node_id in self._rows:
                    self._rows[node_id].set_label(self._node_label(node_id))

    def _count(self, view: PassView) -> set[tuple[str, ...]]:
        """Fold the nodes that ran since the last snapshot into their modules' stats; the
        module paths that changed."""
        touched: set[tuple[str, ...]] = set()
        for node_id in view.executed()[self._counted :]:
            got = node_stats(view, node_id)
            if got is None:
                continue
            norm, bad = got
            parts = node_module(view.graph.nodes[node_id]) if node_id in view.graph.nodes \
                else ()
            for i in range(1, len(parts) + 1):
                old = self._stats.get(parts[:i], Stats(0, 0, None, False))
                top = old.norm if norm is None else norm if old.norm is None else \
                    max(old.norm, norm)
                self._stats[parts[:i]] = Stats(old.done + 1, 0, top, old.nonfinite or bad)
                touched.add(parts[:i])
        self._counted = view.done
        return touched

    def _find(self, path: tuple[str, ...]) -> Module | None:
        mod = self._root
        for part in path:
            if mod is None:
                return None
            mod = mod.children.get(part)
        return mod

    def _load(self, mod: Module) -> None:
        if mod.path in self._loaded:
            return
        parent = self._mods.get(mod.path)
        if parent is None:
            return
        self._loaded.add(mod.path)
        for name, child in mod.children.items():
            tree_node = parent.add(name, ("module", child.path))
            self._mods[child.path] = tree_node
            tree_node.set_label(self._module_label(tree_node))
        for node_id in mod.nodes:
            self._rows[node_id] = parent.add_leaf(self._node_label(node_id), ("node", node_id))

    def _module_label(self, tree_node: TreeNode[Row]) -> Text:
        assert tree_node.data is not None and self._view is not None
        path = tree_node.data[1]
        mod = self._find(path) if isinstance(path, tuple) else None
        if mod is None:
            return Text("?")
        stats = self._stats.get(path, Stats(0, 0, None, False))
        counts = f"  {stats.done}✓ {len(mod.all_nodes) - stats.done}·"
        norm = Text("  ‖g‖≤", style="dim").append_text(num(stats.norm)) \
            if stats.norm is not None else Text()
        # never wider than the panel (a number cut at the right would misread): the norm goes
        # first, then the name is cut from the left
        width = self.content_region.width
        room = width - self.styles.scrollbar_size_vertical - 2 - \
            max(len(path) - 1, 0) * self.guide_depth if width else 10**6
        name = path[-1] if path else ""
        room -= len(counts) + (2 if stats.nonfinite else 0)
        if len(name) + norm.cell_len > room:
            norm = Text()
        text = Text(cut_left(name, max(room, 4)), style="bold")
        if stats.nonfinite:  # first, where a narrow panel cannot cut it off
            text.append(" ✗", style="bold red")
        text.append(counts, style="dim")
        return text.append_text(norm)

    def _node_label(self, node_id: int) -> Text:
        assert self._view is not None
        info = self._view.graph.nodes[node_id]
        glyph, style = GLYPHS[self._view.state(node_id, self._current)]
        name, leaf, node = info.name, info.leaf.rsplit(".", 1)[-1] if info.leaf else "", \
            f" #{node_id}"
        # a row never wider than the panel (nothing cut at the right): the id goes first, then
        # AccumulateGrad is shortened and the leaf cut from the left, then the name in the middle
        width = self.content_region.width
        room = width - self.styles.scrollbar_size_vertical - len(glyph) - 1 - \
            max(len(node_module(info)), 1) * self.guide_depth if width else 10**6
        if len(name) + (len(leaf) + 1 if leaf else 0) + len(node) > room:
            node = ""
            if leaf:
                name, leaf = name_and_leaf(name, leaf, room)
            elif len(name) > room:
                name = cut_middle(name, max(room, 6))
        text = Text.assemble((glyph + " ", style), (name, ""))
        if leaf:
            text.append(f" {leaf}", style="green")
        text.append(node, style="dim")
        return text

    def on_resize(self) -> None:
        """Re-cut the rows built so far to the new width."""
        for node_id, row in self._rows.items():
            row.set_label(self._node_label(node_id))
        for path, tree_node in self._mods.items():
            if path:  # not the (hidden) root
                tree_node.set_label(self._module_label(tree_node))

    def breadcrumb(self, node_id: int) -> str:
        """``model › transformer › h.3 › attn`` for the node's module."""
        if self._view is None or node_id not in self._view.graph.nodes:
            return ""
        crumb = " › ".join(node_module(self._view.graph.nodes[node_id]))
        return cut_left(crumb, max(8, self.size.width - 8)) if self.size.width else crumb

    def _crumb(self, node_id: int) -> None:
        set_subtitle(self, self.breadcrumb(node_id))

    def reveal(self, node_id: int, move: bool = True) -> None:
        """Unfold the node's module (and its parents); by default put the cursor on it."""
        if self._view is None or self._root is None or node_id not in self._view.graph.nodes:
            return
        parts = node_module(self._view.graph.nodes[node_id])
        for i in range(len(parts) + 1):
            mod = self._find(parts[:i])
            if mod is None:
                return
            self._load(mod)
            tree_node = self._mods.get(parts[:i])
            if tree_node is not None and i and not tree_node.is_expanded:
                tree_node.expand()
        set_subtitle(self, self.breadcrumb(node_id))
        if not self.size.width:  # just shown: cut the breadcrumb once laid out
            self.call_after_refresh(self._crumb, node_id)
        row = self._rows.get(node_id)
        if row is not None and move:
            self._tree_lines  # noqa: B018 - rebuild line numbers so the cursor lands right
            self.move_cursor(row)
            self.scroll_to_node(row, animate=False)

    def action_unfold(self) -> None:
        node = self.cursor_node
        if node is not None and node.allow_expand and not node.is_expanded:
            node.expand()

    def action_fold(self) -> None:
        node = self.cursor_node
        if node is None:
            return
        if node.allow_expand and node.is_expanded:
            node.collapse()
        elif node.parent is not None and node.parent is not self.root:
            self.move_cursor(node.parent)

    @on(Tree.NodeExpanded)
    def _expanded(self, event: Tree.NodeExpanded[Row]) -> None:
        data = event.node.data
        if data is not None and data[0] == "module" and isinstance(data[1], tuple):
            mod = self._find(data[1])
            if mod is not None:
                self._load(mod)

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event: Tree.NodeHighlighted[Row]) -> None:
        event.stop()
        data = event.node.data
        if data is not None and data[0] == "node" and isinstance(data[1], int):
            set_subtitle(self, self.breadcrumb(data[1]))
            self.post_message(GraphPanel.NodeChosen(data[1]))

    @on(Tree.NodeSelected)
    def _selected(self, event: Tree.NodeSelected[Row]) -> None:
        event.stop()
