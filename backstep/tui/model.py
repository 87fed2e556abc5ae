"""The session model: protocol events in, immutable snapshots out (stdlib only, no textual).

The reader thread owns one ``SessionModel`` and applies every event to it; the UI only ever sees
``Snapshot`` objects. A snapshot never changes after it is made: per-pass data that grows while a
pass runs (records, accumulations) lives in append-only logs, and a snapshot remembers how much
of each log it may see, so making one costs O(1) even on a 10,000-node graph.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

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


def _summaries(value: Any) -> tuple[Summary | None, ...]:
    return tuple(_mapping(item) for item in _tuple(value))


@dataclass(frozen=True)
class SessionInfo:
    """What the debuggee said about itself when it connected."""

    version: int | None
    torch: str | None
    argv: tuple[str, ...]
    pid: int | None


@dataclass(frozen=True)
class NodeInfo:
    """One autograd node as ``pass_begin`` described it."""

    id: int
    name: str
    next: tuple[int | None, ...]
    leaf: str | None = None
    source: Summary | None = None
    module: str | None = None
    saved_bytes: int | None = None


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
    parents: Mapping[int, tuple[int, ...]]

    @classmethod
    def build(cls, raw_nodes: Any, roots: Any) -> Graph:
        nodes: dict[int, NodeInfo] = {}
        for raw in _tuple(raw_nodes):
            if not isinstance(raw, dict) or not isinstance(raw.get("id"), int):
                continue
            nexts = tuple(n if isinstance(n, int) else None for n in _tuple(raw.get("next")))
            saved_bytes = raw.get("saved_bytes")
            nodes[raw["id"]] = NodeInfo(
                id=raw["id"],
                name=str(raw.get("name", "?")),
                next=nexts,
                leaf=raw.get("leaf") if isinstance(raw.get("leaf"), str) else None,
                source=_mapping(raw.get("source")),
                module=raw.get("module") if isinstance(raw.get("module"), str) else None,
                saved_bytes=saved_bytes if isinstance(saved_bytes, int) else None,
            )
        parents: dict[int, list[int]] = {}
        for info in nodes.values():
            for child in info.next:
                if child is not None and child in nodes:
                    parents.setdefault(child, []).append(info.id)
        root_ids = tuple(r for r in _tuple(roots) if isinstance(r, int) and r in nodes)
        if not root_ids:
            root_ids = tuple(i for i in nodes if i not in parents)[:1] or tuple(nodes)[:1]
        return cls(
            nodes=MappingProxyType(nodes),
            order=tuple(nodes),
            roots=root_ids,
            parents=MappingProxyType({k: tuple(v) for k, v in parents.items()}),
        )

    def children(self, node_id: int) -> list[int]:
        """The ids a node's gradients flow to, in ``next_functions`` order, known ids only."""
        info = self.nodes.get(node_id)
        if info is None:
            return []
        return [n for n in info.next if n is not None and n in self.nodes]


class PassLog:
    """Append-only per-pass data; snapshots see a prefix of it."""

    def __init__(self) -> None:
        self.records: dict[int, NodeRecord] = {}
        self.executed: list[int] = []
        self.accumulations: list[Accumulation] = []


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
        held = freed = 0
        seen: set[int] = set()
        for node_id in self.executed():
            rec = self.log.records[node_id]
            seen.add(node_id)
            size = sum(s.bytes for s in rec.saved)
            if self.retain_graph:
                held += size
            else:
                freed += size
        if stop is not None and stop.pass_ == self.number and stop.id not in seen:
            seen.add(stop.id)
            held += sum(s.bytes for s in stop.saved if s.status != "freed")
        for info in self.graph.nodes.values():
            if info.id not in seen and info.saved_bytes:
                held += info.saved_bytes
        return held, freed


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


def _saved(value: Any) -> tuple[SavedInfo, ...]:
    items = []
    for raw in _tuple(value):
        if not isinstance(raw, dict):
            continue
        version = raw.get("version") if isinstance(raw.get("version"), dict) else {}
        shape = raw.get("shape")
        size = raw.get("bytes")
        items.append(
            SavedInfo(
                name=str(raw.get("name", "?")),
                status=str(raw.get("status", "alive")),
                shape=tuple(shape) if isinstance(shape, list) else None,
                dtype=raw.get("dtype") if isinstance(raw.get("dtype"), str) else None,
                bytes=size if isinstance(size, int) and not isinstance(size, bool) else 0,
                version_saved=version.get("saved") if isinstance(version.get("saved"), int) else None,
                version_now=version.get("now") if isinstance(version.get("now"), int) else None,
            )
        )
    return tuple(items)


def _related(value: Any) -> tuple[Related, ...]:
    items = []
    for raw in _tuple(value):
        if not isinstance(raw, dict):
            continue
        file, line, code = raw.get("file"), raw.get("line"), raw.get("code")
        items.append(Related(
            role=str(raw.get("role", "related")),
            file=file if isinstance(file, str) else None,
            line=line if isinstance(line, int) and not isinstance(line, bool) else None,
            code=code if isinstance(code, str) else None,
        ))
    return tuple(items)


class SessionModel:
    """Applies events in order; ``snapshot()`` returns the current immutable view."""

    def __init__(self) -> None:
        self._snap = Snapshot()
        self._diagnosed: set[tuple[str, int | None, Any]] = set()
        self._zeroed_counts: dict[str, int] = {}
        self._leaf_norms: dict[str, float] = {}
        # every pass that began and has not ended (and the shown one): several passes can run
        # at once, each on its own thread, and each keeps its own log
        self._views: dict[int, PassView] = {}

    def snapshot(self) -> Snapshot:
        return self._snap

    def apply(self, event: Mapping[str, Any]) -> bool:
        """Fold one event in; True if it changed what the UI shows. Never raises on bad input."""
        kind = event.get("event")
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            return False
        try:
            new = handler(event)
        except (TypeError, ValueError, KeyError, AttributeError):
            return False  # a malformed event: ignore it, keep the last good state
        if new is None:
            return False
        self._snap = replace(new, seq=self._snap.seq + 1)
        return True

    def _on_session(self, ev: Mapping[str, Any]) -> Snapshot:
        info = SessionInfo(
            version=ev.get("version") if isinstance(ev.get("version"), int) else None,
            torch=ev.get("torch") if isinstance(ev.get("torch"), str) else None,
            argv=tuple(str(a) for a in _tuple(ev.get("argv"))),
            pid=ev.get("pid") if isinstance(ev.get("pid"), int) else None,
        )
        return replace(self._snap, session=info, running=True)

    def _on_pass_begin(self, ev: Mapping[str, Any]) -> Snapshot:
        view = PassView(
            number=int(ev["pass"]),
            parent=ev.get("parent") if isinstance(ev.get("parent"), int) else None,
            api=str(ev.get("api", "backward")),
            retain_graph=bool(ev.get("retain_graph")),
            create_graph=bool(ev.get("create_graph")),
            graph=Graph.build(ev.get("nodes"), ev.get("roots")),
            log=PassLog(),
            thread=ev.get("thread") if isinstance(ev.get("thread"), str) else None,
        )
        self._views[view.number] = view
        snap = replace(self._snap, passes=max(self._snap.passes, view.number), running=True)
        stop = snap.stop
        if stop is not None and stop.thread != view.thread:
            # another thread is paused and shown: the new pass runs beside it, listed
            return self._with_live(snap)
        # nothing is paused, or the paused thread went on (a nested pass): show the new pass
        return self._with_live(self._show(replace(snap, stop=None), view))

    def _current_pass(self, ev: Mapping[str, Any]) -> PassView | None:
        number = ev.get("pass")
        return self._views.get(number) if isinstance(number, int) else None

    def _update(self, view: PassView, **changes: Any) -> Snapshot:
        """A snapshot with ``view`` kept as its pass's latest view (shown if it is shown)."""
        snap = replace(self._snap, **changes)
        shown = snap.pass_ is not None and snap.pass_.number == view.number
        if view.ended and not shown:
            self._views.pop(view.number, None)  # ended out of sight: nothing left to show
        else:
            self._views[view.number] = view
        return replace(snap, pass_=view) if shown else snap

    def _show(self, snap: Snapshot, view: PassView | None) -> Snapshot:
        """Show ``view``; an ended pass that was shown is forgotten once out of sight."""
        old = snap.pass_
        if old is not None and old is not view and old.ended:
            self._views.pop(old.number, None)
        return replace(snap, pass_=view)

    def _with_live(self, snap: Snapshot) -> Snapshot:
        stopped = snap.stop.pass_ if snap.stop is not None else None
        waiting = {w.pass_ for w in snap.waiting}
        live = tuple(
            LivePass(number=v.number, thread=v.thread,
                     state="stopped" if v.number == stopped
                     else "waiting" if v.number in waiting else "running")
            for _, v in sorted(self._views.items()) if not v.ended
        )
        return replace(snap, live=live)

    def _on_node(self, ev: Mapping[str, Any]) -> Snapshot | None:
        view = self._current_pass(ev)
        if view is None or not isinstance(ev.get("id"), int):
            return None
        node_id = ev["id"]
        log = view.log
        if node_id in log.records and log.records[node_id].index < view.done:
            return None  # duplicate
        grad_inputs = ev.get("grad_inputs")
        record = NodeRecord(
            index=len(log.executed),
            step=int(ev.get("step") or len(log.executed) + 1),
            id=node_id,
            name=str(ev.get("name", "?")),
            grad_outputs=_summaries(ev.get("grad_outputs")),
            grad_inputs=_summaries(grad_inputs) if isinstance(grad_inputs, list) else None,
            saved=_saved(ev.get("saved")),
            error=str(ev["error"]) if ev.get("error") else None,
        )
        del log.executed[view.done:]  # forget anything a newer snapshot never published
        log.executed.append(node_id)
        log.records[node_id] = record
        return self._update(replace(view, done=len(log.executed)), running=True)

    def _on_accumulate(self, ev: Mapping[str, Any]) -> Snapshot | None:
        view = self._current_pass(ev)
        leaf = ev.get("leaf")
        if view is None or not isinstance(leaf, str):
            return None
        before = _mapping(ev.get("before"))
        after = _mapping(ev.get("after"))
        retained = bool(ev.get("retained"))
        zeroed = before is None or number(before.get("norm")) == 0.0
        count = 1 if zeroed else self._zeroed_counts.get(leaf, 1) + 1
        self._zeroed_counts[leaf] = count
        if after is not None:
            norm = number(after.get("norm"))
            if norm is not None:
                self._leaf_norms[leaf] = norm
        log = view.log
        del log.accumulations[view.accumulated:]
        log.accumulations.append(
            Accumulation(
                index=len(log.accumulations),
                leaf=leaf,
                id=ev.get("id") if isinstance(ev.get("id"), int) else None,
                before=before,
                after=after,
                retained=retained,
                passes_since_zeroed=count,
            )
        )
        return self._update(replace(view, accumulated=len(log.accumulations)),
                            leaf_norms=MappingProxyType(dict(self._leaf_norms)))

    def _on_pass_end(self, ev: Mapping[str, Any]) -> Snapshot | None:
        view = self._current_pass(ev)
        if view is None:
            return None
        skipped = frozenset(i for i in _tuple(ev.get("skipped")) if isinstance(i, int))
        ended = replace(
            view,
            ended=True,
            status=str(ev.get("status", "ok")),
            error=str(ev["error"]) if ev.get("error") else None,
            skipped=skipped,
        )
        snap = self._update(ended)
        if snap.stop is not None and snap.stop.pass_ == ended.number:
            snap = replace(snap, stop=None)
        return self._with_live(snap)

    def _on_stopped(self, ev: Mapping[str, Any]) -> Snapshot:
        stop = Stop(
            pass_=int(ev["pass"]),
            step=int(ev.get("step") or 0),
            id=int(ev["id"]),
            name=str(ev.get("name", "?")),
            reason=str(ev.get("reason", "step")),
            detail=str(ev["detail"]) if ev.get("detail") else None,
            grad_outputs=_summaries(ev.get("grad_outputs")),
            saved=_saved(ev.get("saved")),
            after=ev.get("after") is True,
            stop=_int(ev.get("stop")),
            thread=_str(ev.get("thread")),
            device=_str(ev.get("device")),
        )
        snap = replace(self._snap, stop=stop, running=False,
                       waiting=tuple(w for w in self._snap.waiting if w.stop != stop.stop
                                     or stop.stop is None))
        view = self._views.get(stop.pass_)
        if view is not None:
            snap = self._show(snap, view)
        return self._with_live(snap)

    def _on_waiting(self, ev: Mapping[str, Any]) -> Snapshot:
        items = []
        for raw in _tuple(ev.get("stops")):
            if not isinstance(raw, dict) or _int(raw.get("stop")) is None \
                    or _int(raw.get("pass")) is None:
                continue
            items.append(Waiting(stop=raw["stop"], pass_=raw["pass"], step=_int(raw.get("step")),
                                 id=_int(raw.get("id")), name=str(raw.get("name", "?")),
                                 thread=_str(raw.get("thread")), device=_str(raw.get("device"))))
        return self._with_live(replace(self._snap, waiting=tuple(items)))

    def _on_diagnosis(self, ev: Mapping[str, Any]) -> Snapshot | None:
        severity = ev.get("severity")
        title = ev.get("title")
        diag = Diagnosis(
            pass_=ev.get("pass") if isinstance(ev.get("pass"), int) else None,
            kind=str(ev.get("kind", "?")),
            message=str(ev.get("message", "")),
            node=ev.get("node") if isinstance(ev.get("node"), int) else None,
            source=_mapping(ev.get("source")),
            title=title if isinstance(title, str) else "",
            severity=severity if severity in SEVERITIES else "error",
            related=_related(ev.get("related")),
        )
        if diag.key in self._diagnosed:
            return None
        self._diagnosed.add(diag.key)
        return replace(self._snap, diagnoses=(*self._snap.diagnoses, diag))

    def _on_exit(self, ev: Mapping[str, Any]) -> Snapshot:
        code = ev.get("code")
        tb = ev.get("traceback")
        info = ExitInfo(code=code if isinstance(code, int) else 1,
                        traceback=tb if isinstance(tb, str) and tb else None)
        return replace(self._snap, exit=info, stop=None, running=False, waiting=(), live=())


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def is_nonfinite(value: Any) -> bool:
    """True for the protocol's non-finite markers and for float NaN/Inf."""
    num = number(value)
    return num is not None and not math.isfinite(num)


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
