"""What the UI reads: immutable snapshots of a session, made of the records in ``records.py``.

Stdlib only, no textual. ``tui/state/model.py`` makes these from protocol events; the panels only
read them. Per-pass data that grows while a pass runs (records, accumulations) lives in
append-only logs (``pass_log.py``), and a snapshot remembers how much of each log it may see.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from backstep.tui.state.pass_log import PassLog
from backstep.tui.state.records import (
    Accumulation,
    Diagnosis,
    ExitInfo,
    Graph,
    LivePass,
    NodeRecord,
    NodeState,
    SessionInfo,
    Stop,
    Waiting,
)


@dataclass(frozen=True)
class PassView:
    """One backward pass as of one moment."""

    number: int
    parent: int | None
    api: str
    retain_graph: bool
    create_graph: bool
    graph: Graph
    log: PassLog = field(repr=False, compare=False)
    done: int = 0  # how many records of the log this view sees
    accumulated: int = 0  # how many accumulations of the log this view sees
    ended: bool = False
    status: str | None = None
    error: str | None = None
    skipped: frozenset[int] = frozenset()
    thread: str | None = None  # the thread that called backward
    edits: tuple[str, ...] = ()  # gradient edits the person made in this pass (``edit`` events)
    recompute: bool = False  # nested in a pass that holds a reentrant checkpoint: its recompute
    before_provenance: bool = False  # its graph was built before backstep attached: no sources

    def record(self, node_id: int) -> NodeRecord | None:
        """The node's record if it ran by this moment."""
        rec = self.log.records.get(node_id)
        return rec if rec is not None and rec.index < self.done else None

    def executed(self) -> list[int]:
        return self.log.executed[: self.done]

    def accumulations(self) -> list[Accumulation]:
        return self.log.accumulations[: self.accumulated]

    def state(self, node_id: int, current: int | None) -> NodeState:
        rec = self.record(node_id)
        if rec is not None:
            return "error" if rec.error else "done"
        if node_id == current and not self.ended:
            return "current"
        if self.ended:
            return "skipped"
        return "pending"

    def saved_totals(self, stop: Stop | None = None) -> tuple[int, int]:
        """Bytes still held by saved tensors and bytes freed so far in this pass.

        A node's saved tensors are freed once it runs unless the pass retains the graph; nodes
        that have not run count with ``saved_bytes`` from ``pass_begin`` when the engine sent it.
        """
        done, listed, total = self.log.saved_upto(self.done, self.graph)
        held, freed = (done, 0) if self.retain_graph else (0, done)
        if stop is not None and stop.pass_ == self.number and self.record(stop.id) is None:
            held += sum(s.bytes for s in stop.saved if s.status != "freed")
            info = self.graph.nodes.get(stop.id)
            listed += info.saved_bytes or 0 if info is not None else 0
        held += total - listed  # the nodes not run yet, as pass_begin listed them
        return held, freed


class LeafNorms(Mapping[str, float]):
    """Each leaf's latest ``.grad`` norm as of one moment, made in O(1).

    A pass that accumulates into hundreds of leaves would otherwise copy a dict of all their
    norms per accumulation, and a replay keeps a snapshot per step: quadratic. Here every
    snapshot shares one append-only history (per leaf: when, and the norm then) on top of a
    base taken at the pass's start, and sees its first ``count`` changes."""

    __slots__ = ("_base", "_when", "_norm", "_count")

    def __init__(self, base: Mapping[str, float], when: Mapping[str, list[int]],
                 norm: Mapping[str, list[float]], count: int) -> None:
        self._base, self._when, self._norm, self._count = base, when, norm, count

    def __getitem__(self, leaf: str) -> float:
        when = self._when.get(leaf)
        if when:
            i = bisect.bisect_left(when, self._count)
            if i:
                return self._norm[leaf][i - 1]
        return self._base[leaf]

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        for leaf, when in self._when.items():
            if leaf not in self._base and when[0] < self._count:
                yield leaf

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"LeafNorms({dict(self)!r})"


@dataclass(frozen=True)
class Snapshot:
    """Everything the UI shows, at one moment. Immutable."""

    seq: int = 0
    session: SessionInfo | None = None
    pass_: PassView | None = None
    passes: int = 0
    stop: Stop | None = None
    running: bool = False
    waiting: tuple[Waiting, ...] = ()  # stops in line behind ``stop``, longest waiting first
    live: tuple[LivePass, ...] = ()  # passes that began and have not ended, by number
    exit: ExitInfo | None = None
    diagnoses: tuple[Diagnosis, ...] = ()
    leaf_norms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def current(self) -> int | None:
        """The node the debuggee is paused before, if it is paused in the shown pass."""
        if self.stop is None or self.pass_ is None or self.stop.pass_ != self.pass_.number:
            return None
        return self.stop.id
