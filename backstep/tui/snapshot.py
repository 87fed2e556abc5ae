"""What the UI reads: immutable snapshots of a session and the records they are made of.

Stdlib only, no textual. ``tui/model.py`` makes these from protocol events; the panels only
read them. Per-pass data that grows while a pass runs (records, accumulations) lives in
append-only logs, and a snapshot remembers how much of each log it may see.
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, TypeVar

from backstep.tui.pass_log import PassLog

T = TypeVar("T")

NodeState = Literal["done", "current", "pending", "skipped", "error"]
SEVERITIES = ("error", "warning", "info")
Summary = Mapping[str, Any]


def number(value: Any) -> float | None:
    """A summary field as a float: the protocol writes non-finite values as strings."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)  # "nan", "inf", "-inf"
        except ValueError:
            return None
    return None


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else ()


def _mapping(value: Any) -> Summary | None:
    return MappingProxyType(dict(value)) if isinstance(value, dict) else None


def summary_of(value: Any) -> Summary | None:
    """A tensor summary as the UI keeps it: read-only, its keys and short strings (dtype,
    device, "nan") shared with every other summary's; one already made is kept as it is.
    (One loop, no call per item: three summaries a node, thousands of nodes a pass.)"""
    if isinstance(value, MappingProxyType):
        return value
    if not isinstance(value, dict):
        return None
    intern = sys.intern
    kept = {}
    for k, v in value.items():
        if type(v) is str and len(v) <= 40:
            v = intern(v)
        kept[intern(k) if type(k) is str and len(k) <= 40 else k] = v
    return MappingProxyType(kept)


def evolve(obj: T, /, **changes: Any) -> T:
    """``dataclasses.replace`` for the frozen snapshot classes, without running ``__init__``
    again (no class here has ``__post_init__`` or slots): the model makes four per node event,
    and ``replace`` cost more than everything else it does for one."""
    fields = obj.__dataclass_fields__  # type: ignore[attr-defined]
    for name in changes:
        if name not in fields:
            raise TypeError(f"{type(obj).__name__} has no field {name!r}")
    new = object.__new__(type(obj))
    state = new.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return new


def _summaries(value: Any) -> tuple[Summary | None, ...]:
    if isinstance(value, tuple):  # made already (a replay makes a step's once for two events)
        return value
    return tuple(summary_of(item) for item in _tuple(value))


@dataclass(frozen=True)
class SessionInfo:
    """What the debuggee said about itself when it connected."""

    version: int | None
    torch: str | None
    argv: tuple[str, ...]
    pid: int | None
    process_group: str | None = None  # "gloo (2 ranks)" once the script's group is up
    collective_timeout: float | None = None  # seconds, as the group says
    eager: bool = False  # --eager: torch.compile is off for the whole script


class NodeInfo(NamedTuple):
    """One autograd node as ``pass_begin`` described it (a named tuple: a pass change builds
    thousands of them while the person waits, at a third of a frozen dataclass's cost)."""

    id: int
    name: str
    next: tuple[int | None, ...]
    leaf: str | None = None
    source: Summary | None = None
    module: str | None = None
    saved_bytes: int | None = None
    comm: str | None = None  # where FSDP or DTensor communicate (``engine/sharded.py``)


_ID_TYPES = frozenset({int, type(None)})  # what a node's ``next`` holds, as written


@dataclass(frozen=True)
class SavedInfo:
    """One saved tensor or scalar of a node."""

    name: str
    status: str
    shape: tuple[int, ...] | None
    dtype: str | None
    bytes: int
    version_saved: int | None = None
    version_now: int | None = None
    value: str | None = None  # a saved scalar's value, as shown (None: none recorded)


@dataclass(frozen=True)
class NodeRecord:
    """What happened when a node ran (a ``node`` event)."""

    index: int  # position in the pass's execution log (0-based)
    step: int
    id: int
    name: str
    grad_outputs: tuple[Summary | None, ...]
    grad_inputs: tuple[Summary | None, ...] | None
    saved: tuple[SavedInfo, ...]
    error: str | None


@dataclass(frozen=True)
class Accumulation:
    """A leaf's ``.grad`` before and after one pass accumulated into it."""

    index: int
    leaf: str
    id: int | None
    before: Summary | None
    after: Summary | None
    retained: bool
    passes_since_zeroed: int


@dataclass(frozen=True)
class Stop:
    """The debuggee is paused before node ``id`` runs — or, for a gradient breakpoint, just
    after it ran (``after``) — a ``stopped`` event."""

    pass_: int
    step: int
    id: int
    name: str
    reason: str
    detail: str | None
    grad_outputs: tuple[Summary | None, ...]
    saved: tuple[SavedInfo, ...]
    after: bool = False
    stop: int | None = None  # the engine's number for this pause: commands name it
    thread: str | None = None  # the thread the node runs on
    device: str | None = None  # its gradient's device


@dataclass(frozen=True)
class Waiting:
    """Another paused thread, in line behind the shown stop (a ``waiting`` event's item)."""

    stop: int
    pass_: int
    step: int | None
    id: int | None
    name: str
    thread: str | None
    device: str | None


@dataclass(frozen=True)
class LivePass:
    """A pass that began and has not ended, and what it is doing now."""

    number: int
    state: Literal["stopped", "waiting", "running"]
    thread: str | None  # the thread that called backward


@dataclass(frozen=True)
class Related:
    """Another line a diagnosis names, and why (``freed_by``, ``backward``, ``inplace_op``...)."""

    role: str
    file: str | None
    line: int | None
    code: str | None


@dataclass(frozen=True)
class Diagnosis:
    """A known failure pattern the engine recognised."""

    pass_: int | None
    kind: str
    message: str
    node: int | None
    source: Summary | None
    title: str = ""
    severity: str = "error"  # "error" | "warning" | "info"
    related: tuple[Related, ...] = ()

    @property
    def key(self) -> tuple[str, int | None, Any]:
        """One cause: the engine reports each once, the UI shows a repeat once too."""
        line = self.source.get("line") if self.source is not None else None
        file = self.source.get("file") if self.source is not None else None
        return (self.kind, self.node, (file, line))


@dataclass(frozen=True)
class ExitInfo:
    """The script ended: its exit code and, when it raised, the traceback text."""

    code: int
    traceback: str | None


@dataclass(frozen=True)
class Graph:
    """The node table of one pass, built once at ``pass_begin`` and never changed."""

    nodes: Mapping[int, NodeInfo]
    order: tuple[int, ...]
    roots: tuple[int, ...]
    reached: frozenset[int]  # the ids some node's gradients flow to (those with a parent)

    @classmethod
    def build(cls, raw_nodes: Any, roots: Any) -> Graph:
        nodes: dict[int, NodeInfo] = {}
        # plain type checks and the tuple made directly (NodeInfo's own __new__ is Python): a
        # pass change of a 2500-node graph builds this while the person waits for the key's
        # answer (the parsed event is let go: its source dicts are wrapped, not copied)
        make = tuple.__new__
        raws = [raw for raw in _tuple(raw_nodes) if type(raw) is dict]
        lists = [raw.get("next") for raw in raws]
        # the next lists hold ids and nulls, as written: checked all at once, not node by node
        written = {*map(type, chain.from_iterable(
            [nxt for nxt in lists if type(nxt) is list]))} <= _ID_TYPES
        for raw, nxt in zip(raws, lists, strict=True):
            node_id = raw.get("id")
            if type(node_id) is not int:
                continue
            if type(nxt) is not list or not nxt:
                nexts: tuple[int | None, ...] = ()
            elif written:
                nexts = tuple(nxt)
            else:
                nexts = tuple([n if type(n) is int else None for n in nxt])
            name, leaf, module = raw.get("name", "?"), raw.get("leaf"), raw.get("module")
            size, source, comm = raw.get("saved_bytes"), raw.get("source"), raw.get("comm")
            nodes[node_id] = make(NodeInfo, (
                node_id, name if type(name) is str else str(name), nexts,
                leaf if type(leaf) is str else None,
                MappingProxyType(source) if type(source) is dict else None,
                module if type(module) is str else None,
                size if type(size) is int else None,
                comm if type(comm) is str else None))
        reached = frozenset(chain.from_iterable(info.next for info in nodes.values()))
        root_ids = tuple(r for r in _tuple(roots) if isinstance(r, int) and r in nodes)
        if not root_ids:
            root_ids = tuple(i for i in nodes if i not in reached)[:1] or tuple(nodes)[:1]
        return cls(nodes=MappingProxyType(nodes), order=tuple(nodes), roots=root_ids,
                   reached=reached)

    def children(self, node_id: int) -> list[int]:
        """The ids a node's gradients flow to, in ``next_functions`` order, known ids only."""
        info = self.nodes.get(node_id)
        if info is None:
            return []
        return [n for n in info.next if n is not None and n in self.nodes]


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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def is_nonfinite(value: Any) -> bool:
    """True for the protocol's non-finite markers and for float NaN/Inf."""
    num = number(value)
    return num is not None and not math.isfinite(num)
