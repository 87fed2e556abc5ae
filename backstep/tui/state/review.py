"""Step back in a live session: the shown pass, or an earlier one, as it was before a node ran.

Nothing is re-executed. A snapshot's pass log is append-only and a view sees a prefix of it, so
the state before the k-th executed node is the same view with a shorter prefix, and the stop a
person saw there is rebuilt from that node's record (its incoming gradients and saved tensors
were recorded as they were before it ran). Earlier passes come from the ended passes the session
model keeps (``SessionModel.ended``, bounded: the oldest are dropped first). Stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from backstep.tui.state.records import Stop
from backstep.tui.state.snapshot import PassView, Snapshot


@dataclass(frozen=True)
class Cursor:
    """Where a review is: before the ``k``-th executed node (0-based) of pass ``number``."""

    number: int
    k: int


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


def reviewable(snap: Snapshot, ended: Sequence[PassView]) -> list[PassView]:
    """The passes a review can show, in order: the kept ended passes that began before the
    shown one, then the shown one (its live view)."""
    shown = snap.pass_
    if shown is None:
        return []
    earlier = sorted((v for v in ended if v.number < shown.number), key=lambda v: v.number)
    return [*earlier, shown]


def review_cursor(snap: Snapshot, ended: Sequence[PassView], cursor: Cursor) -> Snapshot | None:
    """What the panels show at ``cursor`` (None: it is not there any more)."""
    for view in reviewable(snap, ended):
        if view.number == cursor.number:
            return review_at(replace(snap, pass_=view), cursor.k)
    return None


def back(snap: Snapshot, ended: Sequence[PassView], cursor: Cursor | None,
         whole_pass: bool = False) -> Cursor | None:
    """One node back from ``cursor`` (None: the live stop), across the start of a pass into
    the one before; ``whole_pass``: to the start of this pass, or of the one before when
    already there. None when nothing earlier is kept."""
    views = reviewable(snap, ended)
    if not views:
        return None
    if cursor is None:
        i, k = len(views) - 1, len(views[-1].executed())
    else:
        found = [j for j, v in enumerate(views) if v.number == cursor.number]
        if not found:
            return None
        i, k = found[0], cursor.k
    if whole_pass and k > 0:
        return Cursor(views[i].number, 0) if views[i].executed() else None
    if k - 1 >= 0 and not whole_pass:
        return Cursor(views[i].number, k - 1)
    for j in range(i - 1, -1, -1):  # the pass before with any node recorded
        count = len(views[j].executed())
        if count:
            return Cursor(views[j].number, 0 if whole_pass else count - 1)
    return None


def forward(snap: Snapshot, ended: Sequence[PassView], cursor: Cursor,
            whole_pass: bool = False) -> Cursor | None:
    """One node on from ``cursor`` (or to the start of the next pass); None: back at the
    live stop."""
    views = reviewable(snap, ended)
    found = [j for j, v in enumerate(views) if v.number == cursor.number]
    if not found:
        return None
    i = found[0]
    if not whole_pass and cursor.k + 1 < len(views[i].executed()):
        return Cursor(cursor.number, cursor.k + 1)
    for j in range(i + 1, len(views)):  # the next pass with any node recorded
        if views[j].executed():
            return Cursor(views[j].number, 0)
    return None  # past the shown pass's last recorded node: its live state
