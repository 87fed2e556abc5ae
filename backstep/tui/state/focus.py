"""One node of one snapshot, as the detail panels (gradients, saved, source) show it."""

from __future__ import annotations

from dataclasses import dataclass

from backstep.tui.state.records import NodeInfo, NodeRecord, NodeState, SavedInfo, Stop, Summary
from backstep.tui.state.snapshot import Snapshot


@dataclass(frozen=True)
class Focus:
    """One node of one snapshot, as the detail panels show it."""

    snapshot: Snapshot
    node: int | None
    info: NodeInfo | None
    record: NodeRecord | None
    stop: Stop | None
    state: NodeState | None

    @property
    def grad_outputs(self) -> tuple[Summary | None, ...] | None:
        if self.record is not None:
            return self.record.grad_outputs
        if self.stop is not None:
            return self.stop.grad_outputs
        return None

    @property
    def saved(self) -> tuple[SavedInfo, ...] | None:
        if self.record is not None:
            return self.record.saved
        if self.stop is not None:
            return self.stop.saved
        return None


def focus(snapshot: Snapshot, node_id: int | None) -> Focus:
    """What the panels need about ``node_id`` (the current node when None)."""
    view = snapshot.pass_
    if node_id is None:
        node_id = snapshot.current
    if view is None or node_id is None or node_id not in view.graph.nodes:
        return Focus(snapshot, None, None, None, None, None)
    current = snapshot.current
    return Focus(
        snapshot=snapshot,
        node=node_id,
        info=view.graph.nodes[node_id],
        record=view.record(node_id),
        stop=snapshot.stop if node_id == current else None,
        state=view.state(node_id, current),
    )
