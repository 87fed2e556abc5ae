"""Step back in a live session: the shown pass as it was before an earlier node ran.

Nothing is re-executed. A snapshot's pass log is append-only and a view sees a prefix of it, so
the state before the k-th executed node is the same view with a shorter prefix, and the stop a
person saw there is rebuilt from that node's record (its incoming gradients and saved tensors
were recorded as they were before it ran). Stdlib only.
"""

from __future__ import annotations

from dataclasses import replace

from backstep.tui.snapshot import Snapshot, Stop


def review_at(snap: Snapshot, k: int) -> Snapshot | None:
    """The shown pass before its ``k``-th executed node (0-based) ran; None when there is no
    such node."""
    view = snap.pass_
    if view is None:
        return None
    executed = view.executed()
    if not 0 <= k < len(executed):
        return None
    record = view.log.records[executed[k]]
    ran = set(executed[:k])
    accumulated = 0
    for acc in view.accumulations():  # in order: each follows its AccumulateGrad's record
        if acc.id not in ran:
            break
        accumulated += 1
    past = replace(view, done=k, accumulated=accumulated, ended=False, status=None, error=None,
                   skipped=frozenset())
    stop = Stop(pass_=view.number, step=record.step, id=record.id, name=record.name,
                reason="review", detail=None, grad_outputs=record.grad_outputs,
                saved=record.saved, thread=view.thread)
    return replace(snap, pass_=past, stop=stop, running=False, waiting=())
