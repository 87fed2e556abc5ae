"""How a grad_fn graph becomes a shallow, lazily built tree (stdlib only).

Autograd graphs are long chains with a few branches; Textual's Tree builds recursively and breaks
near 1000 levels, and 10,000 eager nodes are slow. So the tree never nests by graph depth:

* each node is shown once, under the first parent a depth-first walk from the roots reaches it
  by; its other parents show a link row (``-> MulBackward0 #5``) instead;
* the tree of first parents is cut into heavy paths (each node continues into its child with
  the biggest subtree): a path is a flat run of sibling rows, and only the lighter children nest
  one level under their parent. Every step down at least halves the subtree, so nesting depth
  stays below log2(nodes) + a few, whatever the graph's depth (a 20,000-deep chain is one path);
* paths longer than ``CHUNK`` rows are cut into collapsible chunks, so the first frame builds a
  few hundred rows however big the graph is, and a chunk is built only when opened.

Containers are named by keys; ``rows(key)`` lists a container's rows on demand and
``reveal(node)`` says which containers to open to show a node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backstep.tui.state.records import Graph

CHUNK = 100

# ("node", id, 0) | ("path", head, 0) | ("chunk", head, k) | ("top", 0, 0) | ("region", id, 0)
Key = tuple[str, int, int]
TOP: Key = ("top", 0, 0)


@dataclass(frozen=True)
class Row:
    """One line of the graph tree: a node, a link to a node shown elsewhere, or a container."""

    kind: Literal["node", "link", "path", "chunk", "region", "op"]
    # the graph node (for a path: its head; for a chunk: its first node; for a compiled
    # region's group and its ops: the region's node)
    node: int
    key: Key | None = None  # set when the row can be opened
    count: int = 0  # nodes inside a path or chunk row
    last: int | None = None  # a chunk's last node


class GraphLayout:
    """Spanning tree, heavy paths and chunking of one pass's graph, computed in O(nodes)."""

    def __init__(self, graph: Graph, chunk: int = CHUNK) -> None:
        self.graph = graph
        self.chunk = chunk
        self.owner: dict[int, int | None] = {}
        self.owned: dict[int, list[int]] = {}
        self.links: dict[int, list[int]] = {}
        self.tops: list[int] = []
        self._order: list[int] = []  # the walk's order, parents first
        self._span()
        self._paths()

    def _span(self) -> None:
        """Iterative depth-first walk: first parent to reach a node owns it. Records the walk's
        order (parents before their children) for ``_paths``; a node that owns no children has
        no entry in ``owned`` (about half of a graph: the AccumulateGrad leaves)."""
        graph = self.graph
        nodes, owner, owned, links = graph.nodes, self.owner, self.owned, self.links
        order = self._order
        starts = list(graph.roots) + [n for n in graph.order if n not in graph.reached]
        starts += list(graph.order)  # anything unreachable from a root (cycles cannot occur)
        for start in starts:
            if start in owner:
                continue
            owner[start] = None
            self.tops.append(start)
            stack = [start]
            while stack:
                node = stack.pop()
                order.append(node)
                kids: list[int] = []
                for child in nodes[node].next:  # known ids only (owner holds no other)
                    if child in owner:  # reached before (the node itself included): a link
                        linked = links.setdefault(node, [])
                        if child not in kids and child not in linked:
                            linked.append(child)
                    elif child in nodes:  # not None, nor an id the table lacks
                        owner[child] = node
                        kids.append(child)
                if kids:
                    owned[node] = kids
                    # push in reverse so the first next_function is walked first
                    stack.extend(reversed(kids))

    def _paths(self) -> None:
        """Subtree sizes (children before parents: the walk's order reversed), heavy children,
        and the path of each node."""
        size: dict[int, int] = {}
        order = self._order
        owned = self.owned
        heavy: dict[int, int | None] = dict.fromkeys(order)
        for node in reversed(order):  # children before parents: sizes, then the heaviest child
            kids = owned.get(node)
            if kids is None:
                size[node] = 1
                continue
            total, best, most = 1, None, -1
            for child in kids:
                s = size[child]
                total += s
                if s > most:  # the first of equal sizes, as max() picks
                    best, most = child, s
            size[node] = total
            heavy[node] = best
        self.heavy = heavy
        head: dict[int, int] = {}
        position: dict[int, int] = {}
        paths: dict[int, list[int]] = {}
        owner = self.owner
        for node in order:
            parent = owner[node]
            if parent is not None and heavy[parent] == node:
                continue  # continues its parent's path
            path = [node]
            nxt = heavy[node]
            while nxt is not None:
                path.append(nxt)
                nxt = heavy[nxt]
            paths[node] = path
            for i, member in enumerate(path):
                head[member] = node
                position[member] = i
        self.head, self.position, self.paths = head, position, paths
        self._order = []  # only the two passes above need it

    def light(self, node: int) -> list[int]:
        """The children that start paths of their own, nested under ``node``."""
        heavy = self.heavy.get(node)
        return [c for c in self.owned.get(node, ()) if c != heavy]

    def _node_row(self, node: int) -> Row:
        opens = bool(self.light(node) or self.links.get(node))
        return Row("node", node, ("node", node, 0) if opens else None)

    def _path_rows(self, head: int) -> list[Row]:
        path = self.paths[head]
        if len(path) <= self.chunk * 2:
            return [self._node_row(n) for n in path]
        rows = []
        for k in range(0, len(path), self.chunk):
            part = path[k : k + self.chunk]
            rows.append(Row("chunk", part[0], ("chunk", head, k // self.chunk), len(part), part[-1]))
        return rows

    def _branch_row(self, head: int) -> Row:
        if len(self.paths[head]) == 1:
            return self._node_row(head)
        return Row("path", head, ("path", head, 0), len(self.paths[head]))

    def rows(self, key: Key) -> list[Row]:
        """The rows inside a container."""
        kind, ident, index = key
        if kind == "top":
            if len(self.tops) == 1:
                return self._path_rows(self.tops[0])
            return [self._branch_row(t) for t in self.tops]
        if kind == "path":
            return self._path_rows(ident)
        if kind == "chunk":
            part = self.paths[ident][index * self.chunk : (index + 1) * self.chunk]
            return [self._node_row(n) for n in part]
        if kind == "node":
            rows = [self._branch_row(c) for c in self.light(ident)]
            rows += [Row("link", target) for target in self.links.get(ident, ())]
            return rows
        raise KeyError(key)

    def reveal(self, node: int) -> list[Key]:
        """The containers to open, outermost first, so that ``node``'s own row is visible."""
        keys: list[Key] = []
        current: int | None = node
        while current is not None and current in self.head:
            head = self.head[current]
            path = self.paths[head]
            if len(path) > self.chunk * 2:
                keys.append(("chunk", head, self.position[current] // self.chunk))
            parent = self.owner[head]
            if parent is None:
                if len(self.tops) > 1 and len(path) > 1:
                    keys.append(("path", head, 0))
                break
            if len(path) > 1:
                keys.append(("path", head, 0))
            keys.append(("node", parent, 0))
            current = parent
        keys.reverse()
        return keys

    def depth_bound(self) -> int:
        """The deepest nesting ``reveal`` can ask for (tests check it stays logarithmic)."""
        return max((len(self.reveal(n)) for n in self.head), default=0)


_LAID_OUT: list[GraphLayout] = []  # the latest few, newest last
KEEP = 3  # the pass shown and the two beside it, opened ahead


def layout_of(graph: Graph) -> GraphLayout:
    """The layout of ``graph``, made once: a replay lays out the next pass's graph ahead,
    while the person reads the current one, and the graph panel finds it here."""
    for layout in _LAID_OUT:
        if layout.graph is graph:
            return layout
    layout = GraphLayout(graph)
    _LAID_OUT.append(layout)
    del _LAID_OUT[:-KEEP]
    return layout
