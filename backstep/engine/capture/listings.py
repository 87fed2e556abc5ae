"""``pass_begin``'s node listing, reused while passes keep the same shape.

A training loop builds the same graph every step: the same node types and edges, the same leaf
names, the same forward sources and modules; only the node ids are new. When a pass has the
shape of the one before, its listing's text is that pass's with the new ids written in: the
text ``Graph.describe_all`` itself wrote with stand-in ids, cut at them and joined again around
the new ids, so it is the one ``describe_all`` would write. A shape is remembered as strings
and ints, and the source dicts provenance shares for good (held, so that comparing them by
identity is sound): never a node or a tensor.
"""

from __future__ import annotations

import re
from typing import Any

from backstep.engine.graph import Graph, display_name

_MARK = "\x00"  # JSON text writes control characters escaped: a raw one is always a stand-in
_STAND_IN = re.compile(f"{_MARK}([0-9]+){_MARK}")


class _Shape:
    """What a listing depends on besides its ids, and (from its second sighting) its template."""

    __slots__ = ("names", "edges", "leaves", "comms", "sources", "source_ids", "modules",
                 "shown", "template", "fields", "targets", "rows")

    def __init__(self, graph: Graph, leaves: dict[int, str], comms: dict[int, str],
                 sources: list[Any], source_ids: list[int], modules: list[Any]) -> None:
        self.names = graph.names
        self.edges = graph.edges
        self.leaves = dict(leaves)
        self.comms = dict(comms)
        self.sources = sources
        self.source_ids = source_ids
        self.modules = modules
        self.shown: list[str] | None = None
        # the listing's text cut at its ids: the texts between them, None where an id goes
        self.template: list[str | None] | None = None
        self.fields: list[int] = []  # whose id each None of the template stands for
        # every node's edges in one list (index len(nodes) where an edge is None), and per node
        # (shown name, leaf name, where its edges start and end in that list)
        self.targets: list[int] = []
        self.rows: list[tuple[str, str | None, int, int]] = []

    def make_template(self, graph: Graph, comms: dict[int, str],
                      tags: tuple[list[Any], list[Any]]) -> None:
        """``template`` and what goes with it: ``describe_all``'s own text, so the text joined
        from it is the one ``describe_all`` would write. ``template`` is set last: another
        thread's pass reads the rest once it sees it."""
        count = len(graph)
        stand_ins = [f"{_MARK}{i}{_MARK}" for i in range(count)]
        _, text = graph.describe_all(self.leaves, comms, stand_ins, tags)
        pieces: list[str | None] = list(_STAND_IN.split(text))  # texts, ids, texts, ...
        self.shown = shown = [display_name(name) for name in self.names]
        self.fields = [int(i) for i in pieces[1::2]]  # type: ignore[arg-type]
        pieces[1::2] = [None] * len(self.fields)
        targets: list[int] = []
        rows = []
        for i, out in enumerate(self.edges):
            start = len(targets)
            targets += [count if j is None else j for j in out]
            rows.append((shown[i], self.leaves.get(i), start, len(targets)))
        self.targets = targets
        self.rows = rows
        self.template = pieces

    def same(self, graph: Graph, leaves: dict[int, str], comms: dict[int, str],
             source_ids: list[int], modules: list[Any]) -> bool:
        return (self.names == graph.names and self.edges == graph.edges
                and self.leaves == leaves and self.comms == comms
                and self.source_ids == source_ids
                and self.modules == modules)


class Listings:
    """``describe(graph, leaf_names)``: ``Graph.describe_all``'s answer, from the previous
    pass's template when the shape repeats. ``enabled=False`` always takes the full path."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.reused = 0  # listings written from a template (for tests and benchmarks)
        self._last: _Shape | None = None

    def describe(self, graph: Graph, leaf_names: dict[int, str],
                 comms: dict[int, str] | None = None) -> tuple[list[dict[str, Any]], str]:
        """``comms``: as ``Graph.describe_all`` takes them (FSDP's communication points)."""
        comms = comms or {}
        if not self.enabled:
            return graph.describe_all(leaf_names, comms)
        ids, tags = graph.ids_and_tags()
        sources, modules = tags
        source_ids = list(map(id, sources))
        last = self._last  # one read: another thread may replace it meanwhile
        if last is None or not last.same(graph, leaf_names, comms, source_ids, modules):
            self._last = _Shape(graph, leaf_names, comms, sources, source_ids, modules)
            return graph.describe_all(leaf_names, comms, None, tags)
        if last.template is None:  # seen twice: worth a template
            last.make_template(graph, comms, tags)
        assert last.template is not None
        self.reused += 1
        after = list(map([*ids, None].__getitem__, last.targets))  # every edge's id, in one go
        dicts = [{"id": node, "name": name, "next": after[start:end], "leaf": leaf,
                  "source": source, "module": module}
                 for node, (name, leaf, start, end), source, module
                 in zip(ids, last.rows, sources, modules, strict=True)]
        for i, comm in last.comms.items():
            dicts[i]["comm"] = comm
        texts = list(last.template)
        texts[1::2] = map(list(map(str, ids)).__getitem__, last.fields)
        return dicts, "".join(texts)  # type: ignore[arg-type]
