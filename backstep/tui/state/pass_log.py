"""A pass's append-only log: the records and accumulations that snapshots see a prefix of.

Kept apart from ``snapshot.py`` because it is the one mutable piece: the model appends to it
as events arrive, and it keeps running totals so a panel's question at every step costs the
same at the end of a long pass as at its start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backstep.tui.state.records import Accumulation, Graph, NodeRecord


class PassLog:
    """Append-only per-pass data; snapshots see a prefix of it."""

    def __init__(self) -> None:
        self.records: dict[int, NodeRecord] = {}
        self.executed: list[int] = []
        self.accumulations: list[Accumulation] = []
        self.regions: dict[int, Any] = {}  # node id -> region.RegionInfo (torch.compile)
        self.memory: dict[str, Any] | None = None  # the pass's ``memory`` event (memory_table)
        # running totals over ``executed``: bytes its records saved, and the saved_bytes the
        # graph gave those nodes (the saved panel asks at every step: a sum over the whole
        # pass each time was 5 ms at the end of a 2,500-node pass)
        self._saved = [0]
        self._listed = [0]
        self._listed_total: int | None = None

    def truncate(self, done: int) -> None:
        """Forget the records past the first ``done`` (a newer snapshot never published)."""
        del self.executed[done:]
        del self._saved[done + 1:]
        del self._listed[done + 1:]

    def saved_upto(self, done: int, graph: Graph) -> tuple[int, int, int]:
        """Bytes saved by the first ``done`` records, the saved_bytes ``graph`` lists for
        those nodes, and for all its nodes."""
        saved, listed, records, executed = self._saved, self._listed, self.records, self.executed
        nodes = graph.nodes
        for i in range(len(saved) - 1, done):
            node_id = executed[i]
            saved.append(saved[-1] + records[node_id].saved_bytes)
            info = nodes.get(node_id)
            listed.append(listed[-1] + (info.saved_bytes or 0 if info is not None else 0))
        if self._listed_total is None:
            self._listed_total = sum(info.saved_bytes or 0 for info in nodes.values())
        return saved[done], listed[done], self._listed_total
