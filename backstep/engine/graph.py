"""The autograd graph of one pass: every node reachable from the roots, with stable ids.

Ids live in ``node.metadata`` (a dict that lives and dies with the node), so a node keeps its id
across passes over a retained graph and backstep never holds a node past its pass.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from backstep.engine.pending_tags import PENDING
from backstep.engine.pending_tags import metadata as node_metadata
from backstep.events.text import compact_json, str_text

ID_KEY = "backstep.id"  # this session's key: a later session (attach() again) has its own
SOURCE_KEY = "backstep.source"
MODULE_KEY = "backstep.module"
_ids = itertools.count(1)
_sessions = 0


def new_session() -> None:
    """A new capture is armed (``attach()`` again, in a notebook): its node ids count from 1,
    as its passes do. A node still alive from an earlier session (a retained graph) holds its
    old id under the old key, so it gets a fresh one here and no two nodes share an id."""
    global ID_KEY, _ids, _sessions
    _sessions += 1
    if _sessions > 1:
        ID_KEY = f"backstep.id.{_sessions}"
        _ids = itertools.count(1)


def id_in(metadata: Any) -> int | None:
    """The id this session gave the node whose ``metadata`` this is, if any."""
    return metadata.get(ID_KEY)


def node_id(node: Any) -> int:
    """The node's backstep id, assigned on first sight."""
    metadata = node.metadata
    value = metadata.get(ID_KEY)
    if value is None:
        value = metadata[ID_KEY] = next(_ids)
    return value


def gradient_edge(item: Any) -> tuple[Any, int] | None:
    """(node, output_nr) that a backward root or input stands for, or None.

    A tensor with a ``grad_fn`` stands for it (what ``get_gradient_edge`` answers, read
    without the ownership token it makes for a custom Function's output: a view node each
    pass, which plain PyTorch never makes); a leaf for its AccumulateGrad node."""
    if isinstance(item, torch.Tensor):
        grad_fn = item.grad_fn
        if grad_fn is not None:
            return (grad_fn, item.output_nr)
        if not item.requires_grad:
            return None
        edge = torch.autograd.graph.get_gradient_edge(item)
        return (edge.node, edge.output_nr) if edge.node is not None else None
    if isinstance(item, _GRADIENT_EDGE):
        return (item.node, item.output_nr)
    return None


_GRADIENT_EDGE = torch.autograd.graph.GradientEdge


class Graph:
    """Nodes in walk order (roots first), their ids, and edges as local indices; ``popped``:
    the nodes' indices in the order the walk took them off its stack (the order in which
    ``history`` numbers a pass's leaves, read here without walking the graph again)."""

    __slots__ = ("nodes", "index", "edges", "popped", "_ids", "_names")

    def __init__(self, roots: list[Any]) -> None:
        nodes: list[Any] = []
        index: dict[Any, int] = {}
        edges: list[list[int | None]] = []
        stack = []
        for root in roots:
            if root is not None and root not in index:
                index[root] = len(nodes)
                nodes.append(root)
                edges.append([])
                stack.append(root)
        popped: list[int] = []
        while stack:
            node = stack.pop()
            at = index[node]
            popped.append(at)
            out = edges[at]
            for child, _ in node.next_functions:
                if child is None:
                    out.append(None)
                    continue
                position = index.get(child)
                if position is None:
                    position = index[child] = len(nodes)
                    nodes.append(child)
                    edges.append([])
                    stack.append(child)
                out.append(position)
        self.nodes = nodes
        self.index = index
        self.edges = edges
        self.popped = popped
        self._ids: list[int] | None = None
        self._names: list[str] | None = None

    @property
    def ids(self) -> list[int]:
        """Node ids, assigned on first use: a pass that never stops or records needs none."""
        ids = self._ids
        return self._read_ids(None, None) if ids is None else ids

    def ids_and_tags(self) -> tuple[list[int], tuple[list[Any], list[Any]]]:
        """``ids`` and ``tags()``, read in one loop when the ids are not read yet (the listing
        wants both, once provenance has tagged the nodes)."""
        if self._ids is not None:
            return self._ids, self.tags()
        sources: list[Any] = []
        modules: list[Any] = []
        return self._read_ids(sources, modules), (sources, modules)

    def _read_ids(self, sources: list[Any] | None, modules: list[Any] | None) -> list[int]:
        """``node_id`` of every node, inline (every node of every recorded pass), and its tags
        into ``sources`` and ``modules`` when given."""
        ids = []
        settle = PENDING and node_metadata  # provenance's forward tags, moved in on first read
        for node in self.nodes:
            metadata = settle(node) if settle else node.metadata
            value = metadata.get(ID_KEY)
            if value is None:
                value = metadata[ID_KEY] = next(_ids)
            ids.append(value)
            if sources is not None:
                sources.append(metadata.get(SOURCE_KEY))
                modules.append(metadata.get(MODULE_KEY))  # type: ignore[union-attr]
        self._ids = ids
        return ids

    @property
    def names(self) -> list[str]:
        if self._names is None:
            self._names = [n.name() for n in self.nodes]
        return self._names

    def __len__(self) -> int:
        return len(self.nodes)

    def describe(self, i: int, leaf_name: str | None) -> dict[str, Any]:
        """The node as ``pass_begin`` lists it."""
        metadata = node_metadata(self.nodes[i])
        ids = self.ids
        return {
            "id": ids[i],
            "name": display_name(self.names[i]),
            "next": [None if j is None else ids[j] for j in self.edges[i]],
            "leaf": leaf_name,
            "source": metadata.get(SOURCE_KEY),
            "module": metadata.get(MODULE_KEY),
        }

    def tags(self) -> tuple[list[Any], list[Any]]:
        """Each node's forward source and module path (``provenance``), or None."""
        sources, modules = [], []
        for node in self.nodes:
            metadata = node_metadata(node)
            sources.append(metadata.get(SOURCE_KEY))
            modules.append(metadata.get(MODULE_KEY))
        return sources, modules

    def describe_all(self, leaf_names: dict[int, str], comms: dict[int, str] | None = None,
                     ids: list[Any] | None = None,
                     tags: tuple[list[Any], list[Any]] | None = None,
                     ) -> tuple[list[dict[str, Any]], str]:
        """Every node as ``describe`` gives it, and the text of its ``"sources"`` and
        ``"nodes"`` as a trace file writes them (``events.form.compact_event``): each distinct
        source once, nodes naming theirs by index, null leaf, source and module left out.
        ``comms``: index -> where a node communicates (``sharded.comm_label``), as ``"comm"``.
        ``ids`` (default: the nodes' own) may be stand-ins that ``str`` writes into the text;
        ``tags`` is ``tags()``'s answer when the caller has it already."""
        ids = self.ids if ids is None else ids
        names, edges = self.names, self.edges
        all_sources, all_modules = self.tags() if tags is None else tags
        dicts: list[dict[str, Any]] = []
        texts: list[str] = []
        sources: dict[int, tuple[Any, str]] = {}  # a call's nodes share its source dict
        where: dict[str, int] = {}  # a source's text -> its index in the table
        for i in range(len(self.nodes)):
            source, module = all_sources[i], all_modules[i]
            leaf = leaf_names.get(i)
            name = display_name(names[i])
            after = [None if j is None else ids[j] for j in edges[i]]
            dicts.append({"id": ids[i], "name": name, "next": after, "leaf": leaf,
                          "source": source, "module": module})
            text = (f'{{"id":{ids[i]},"name":{str_text(name)},'
                    f'"next":[{",".join(["null" if j is None else str(j) for j in after])}]')
            if leaf is not None:
                text += f',"leaf":{str_text(leaf)}'
            if source is not None:
                hit = sources.get(id(source))
                if hit is None or hit[0] is not source:
                    source_text = compact_json(source)
                    if source_text not in where:
                        where[source_text] = len(where)
                    hit = sources[id(source)] = (source, str(where[source_text]))
                text += f',"source":{hit[1]}'
            if module is not None:
                text += f',"module":{str_text(module)}'
            if comms and i in comms:
                dicts[-1]["comm"] = comms[i]
                text += f',"comm":{str_text(comms[i])}'
            texts.append(text + "}")
        table = ('"sources":[' + ",".join(where) + "],") if where else ""
        return dicts, table + '"nodes":[' + ",".join(texts) + "]"

    def execution_order(self) -> list[int]:
        """The order the engine runs these nodes in: a node is ready once every in-graph
        producer has run, and the ready node with the highest sequence number goes first."""
        import heapq

        pending = [0] * len(self.nodes)
        for out in self.edges:
            for j in out:
                if j is not None:
                    pending[j] += 1
        ready = [(-self.nodes[i]._sequence_nr(), i) for i, n in enumerate(pending) if n == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, i = heapq.heappop(ready)
            order.append(i)
            for j in self.edges[i]:
                if j is not None:
                    pending[j] -= 1
                    if pending[j] == 0:
                        heapq.heappush(ready, (-self.nodes[j]._sequence_nr(), j))
        return order

    def ready_unrun(self, ran: list[int]) -> list[int]:
        """Nodes that have not run but whose every in-graph producer has: the candidates that
        were about to run when a pass stopped."""
        blocked = [False] * len(self.nodes)
        for i, out in enumerate(self.edges):
            if not ran[i]:
                for j in out:
                    if j is not None:
                        blocked[j] = True
        return [i for i in range(len(self.nodes)) if not ran[i] and not blocked[i]]


def display_name(name: str) -> str:
    """``torch::autograd::AccumulateGrad`` reads as ``AccumulateGrad``."""
    return name.rsplit("::", 1)[-1]
