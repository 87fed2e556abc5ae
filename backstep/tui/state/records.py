"""The records snapshots are made of: a session, a node and its saved tensors, a stop, a
diagnosis, the exit, a pass's graph; each read defensively from a protocol event.

Stdlib only, no textual. ``snapshot.py`` puts them together; ``pass_log.py`` keeps a pass's
records as they arrive.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, TypeVar

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


def as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (list, tuple)) else ()


def as_mapping(value: Any) -> Summary | None:
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


def summaries_of(value: Any) -> tuple[Summary | None, ...]:
    if isinstance(value, tuple):  # made already (a replay makes a step's once for two events)
        return value
    return tuple(summary_of(item) for item in as_tuple(value))


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

    @property
    def saved_bytes(self) -> int:
        """Bytes its saved tensors held."""
        return sum(s.bytes for s in self.saved)


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
    passes: int | None = None  # how many backward passes ran in all (watched or not)


@dataclass(frozen=True)
class Graph:
    """The node table of one pass, built once at ``pass_begin`` and never changed."""

    nodes: Mapping[int, NodeInfo]
    order: tuple[int, ...]
    roots: tuple[int, ...]
    reached: frozenset[int]  # the ids some node's gradients flow to (those with a parent)
    leaves: tuple[int, ...] = ()  # the leaves' ids in model order, as pass_begin sent them

    @classmethod
    def build(cls, raw_nodes: Any, roots: Any, leaves: Any = None) -> Graph:
        nodes: dict[int, NodeInfo] = {}
        # plain type checks and the tuple made directly (NodeInfo's own __new__ is Python): a
        # pass change of a 2500-node graph builds this while the person waits for the key's
        # answer (the parsed event is let go: its source dicts are wrapped, not copied)
        make = tuple.__new__
        raws = [raw for raw in as_tuple(raw_nodes) if type(raw) is dict]
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
        root_ids = tuple(r for r in as_tuple(roots) if isinstance(r, int) and r in nodes)
        if not root_ids:
            root_ids = tuple(i for i in nodes if i not in reached)[:1] or tuple(nodes)[:1]
        return cls(nodes=MappingProxyType(nodes), order=tuple(nodes), roots=root_ids,
                   reached=reached,
                   leaves=tuple(i for i in as_tuple(leaves) if type(i) is int and i in nodes))

    def children(self, node_id: int) -> list[int]:
        """The ids a node's gradients flow to, in ``next_functions`` order, known ids only."""
        info = self.nodes.get(node_id)
        if info is None:
            return []
        return [n for n in info.next if n is not None and n in self.nodes]


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def is_nonfinite(value: Any) -> bool:
    """True for the protocol's non-finite markers and for float NaN/Inf."""
    num = number(value)
    return num is not None and not math.isfinite(num)
