"""The memory view's table (``M``) for one pass as of one moment: the pass's saved storages
grouped as ``backstep memory`` groups them (``traces.memory``), with what is still held after
the nodes run so far: the table drains as the pass runs. Plain Python, no textual."""

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
    return MemoryTable(rows, total, sum(r["held"] for r in rows), leaves, len(executed))

