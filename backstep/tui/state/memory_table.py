"""The memory view's table (``M``) for one pass as of one moment: the pass's saved storages
grouped as ``backstep memory`` groups them (``traces.memory``), with what is still held after
the nodes run so far: the table drains as the pass runs. Each row names the nodes that save
its storages (``nodes``: what choosing the row selects in the graph: the nodes whose running
releases that memory). Plain Python, no textual."""

from __future__ import annotations

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
