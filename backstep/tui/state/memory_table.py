"""The memory view's table (``M``) for one pass as of one moment: the pass's saved storages
grouped as ``backstep memory`` groups them (``traces.memory``), with what is still held after
the nodes run so far: the table drains as the pass runs. Each row names the nodes that save
its storages (``nodes``: what choosing the row selects in the graph: the nodes whose running
releases that memory). Plain Python, no textual."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backstep.traces import memory as table
from backstep.tui.state.snapshot import PassView


@dataclass(frozen=True)
class MemoryTable:
    rows: list[dict[str, Any]]  # key, bytes, storages, held (still held now)
    total: int  # held at the pass's start
    held: int  # still held now
    leaves: int  # saved leaves, left out
    step: int  # nodes run so far
    nodes: dict[str, tuple[int, ...]]  # row key -> the nodes that save its storages, graph order


def memory_table(view: PassView | None, by: str = "module") -> MemoryTable | None:
    """None when the pass in view has no memory event (an older trace, no pass)."""
    memory = view.log.memory if view is not None else None
    if view is None or memory is None:
        return None
    executed = view.executed()
    steps = {node: k + 1 for k, node in enumerate(executed)}
    freed = table.freed_so_far(memory, steps, view.retain_graph)
    sources = {node: info.source for node, info in view.graph.nodes.items()}
    rows = table.rows(memory, by, freed, sources=sources)
    total = memory.get("bytes") if type(memory.get("bytes")) is int else 0
    leaves = memory.get("leaves") if type(memory.get("leaves")) is int else 0
    return MemoryTable(rows, total, sum(r["held"] for r in rows), leaves, len(executed),
                       holders(memory, by, sources, view.graph.order))


def held_now(view: PassView | None) -> tuple[int, int] | None:
    """(bytes held at the pass's start, bytes still held now), each storage once, as the table
    counts them (the Saved panel's footer, on every frame: no rows made); None without a
    memory event."""
    memory = view.log.memory if view is not None else None
    if view is None or memory is None:
        return None
    steps = {node: k + 1 for k, node in enumerate(view.executed())}
    freed = table.freed_so_far(memory, steps, view.retain_graph)
    held = 0
    for storage, when in zip(memory.get("storages") or [], freed, strict=False):
        if when is None and isinstance(storage, dict) and type(storage.get("bytes")) is int:
            held += storage["bytes"]
    total = memory.get("bytes") if type(memory.get("bytes")) is int else 0
    return total, held


def holders(memory: dict[str, Any], by: str, sources: dict[int, Any],
            order: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Per row key, the ids of the graph's nodes that save its storages: first the nodes the
    row's storages are counted at (the node that made each, else the first that saves it: in a
    module row, that module's own nodes), then the others, each part in graph order (ids the
    graph does not list are left out: a hostile or cut trace)."""
    place = {node: k for k, node in enumerate(order)}
    found: dict[str, set[int]] = {}
    own: dict[str, set[int]] = {}
    for storage in memory.get("storages") or []:
        if not isinstance(storage, dict):
            continue
        held = storage.get("held_by")
        held = [i for i in held if type(i) is int and i in place] if isinstance(held, list) \
            else []
        key = table.key_of(storage, by, sources)
        found.setdefault(key, set()).update(held)
        maker = storage.get("node")
        if type(maker) is int and maker in place:
            own.setdefault(key, set()).add(maker)
        elif held:
            own.setdefault(key, set()).add(held[0])
    out = {}
    for key, ids in found.items():
        mine = own.get(key, set())
        out[key] = tuple(sorted(ids, key=lambda i: (i not in mine, place[i])))  # noqa: B023
    return out


@dataclass(frozen=True)
class SavedCost:
    """What one saved tensor costs, as the pass's memory event counts it."""

    bytes: int  # its storage's (a view costs its whole storage), once however many save it
    leaf: bool = False  # a leaf's storage (a parameter): it outlives the graph, left out
    view: bool = False  # the tensor is a part of its storage (fewer bytes than it)
    here: tuple[str, ...] = ()  # the node's other saved tensors on the same storage
    others: tuple[tuple[int, str], ...] = ()  # (node id, name): other nodes that save it
    counted_at: int | None = None  # the node the memory view counts the storage at


class _Index:
    """(node id, saved name) -> storage index, for one memory event (built once a pass)."""

    def __init__(self, memory: dict[str, Any]) -> None:
        self.memory = memory
        self.at: dict[tuple[int, str], int] = {}
        self.holders: list[list[tuple[int, str]]] = []
        self.leaf: set[tuple[int, str]] = set()
        storages = memory.get("storages")
        for k, storage in enumerate(storages if isinstance(storages, list) else []):
            pairs: list[tuple[int, str]] = []
            if isinstance(storage, dict):
                held, names = storage.get("held_by"), storage.get("names")
                if isinstance(held, list) and isinstance(names, list):
                    for node, saved in zip(held, names, strict=False):
                        if type(node) is int and isinstance(saved, list):
                            pairs += [(node, n) for n in saved if type(n) is str]
            for pair in pairs:
                self.at.setdefault(pair, k)
            self.holders.append(pairs)
        for entry in memory.get("leaf_saved") or []:
            if isinstance(entry, list) and entry and type(entry[0]) is int:
                self.leaf.update((entry[0], n) for n in entry[1:] if type(n) is str)


_INDEXES: dict[int, _Index] = {}


def _index(memory: dict[str, Any]) -> _Index:
    found = _INDEXES.get(id(memory))
    if found is None or found.memory is not memory:
        if len(_INDEXES) >= 16:
            _INDEXES.clear()
        found = _INDEXES[id(memory)] = _Index(memory)
    return found


def saved_costs(view: PassView | None, node: int, saved: Sequence[Any]
                ) -> list[SavedCost | None] | None:
    """Per saved tensor of ``node`` (``SavedInfo``s), what it costs; None for the whole list
    when the pass's memory event does not say (no event, or one from a backstep that did not
    name its storages' tensors), None for an entry it does not list (a scalar, a tensor
    freed or saved through hooks, a storage of no bytes)."""
    memory = view.log.memory if view is not None else None
    if memory is None or not isinstance(memory.get("storages"), list) or (
            memory["storages"] and not any(isinstance(s, dict) and "names" in s
                                           for s in memory["storages"][:1])):
        return None
    index = _index(memory)
    storages = memory["storages"]
    out: list[SavedCost | None] = []
    for item in saved:
        name = item.name
        if (node, name) in index.leaf:
            out.append(SavedCost(item.bytes, leaf=True))
            continue
        k = index.at.get((node, name))
        storage = storages[k] if k is not None else None
        size = storage.get("bytes") if isinstance(storage, dict) else None
        if k is None or type(size) is not int:
            out.append(None)
            continue
        pairs = index.holders[k]
        maker = storage.get("node")  # where the memory view counts it: its maker, else the
        if type(maker) is not int:  # first node that saves it
            maker = pairs[0][0] if pairs else None
        out.append(SavedCost(
            size, view=0 < item.bytes < size,
            here=tuple(n for i, n in pairs if i == node and n != name),
            others=tuple((i, n) for i, n in pairs if i != node),
            counted_at=maker))
    return out
