"""The session model: protocol events in, immutable snapshots out (stdlib only, no textual).

The reader thread owns one ``SessionModel`` and applies every event to it; the UI only ever sees
``Snapshot`` objects. A snapshot never changes after it is made: per-pass data that grows while a
pass runs (records, accumulations) lives in append-only logs, and a snapshot remembers how much
of each log it may see, so making one costs O(1) even on a 10,000-node graph.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from backstep.tui.state.node_record import LazyRecord, saved_infos
from backstep.tui.state.pass_log import PassLog
from backstep.tui.state.records import (
    SEVERITIES,
    Accumulation,
    Diagnosis,
    ExitInfo,
    Graph,
    LivePass,
    Related,
    SessionInfo,
    Stop,
    Waiting,
    as_int,
    as_mapping,
    as_str,
    as_tuple,
    number,
    summaries_of,
    summary_of,
)
from backstep.tui.state.records import evolve as replace
from backstep.tui.state.run_history import RunHistory
from backstep.tui.state.snapshot import LeafNorms, PassView, Snapshot
from backstep.tui.text import region

# ``p`` in a live session looks back into ended passes: their logs are kept, up to this many
# node records and accumulations in all, the oldest pass dropped first
REVIEW_EVENTS = 20_000
# what a handler returns when it changed the model and the snapshot is made later (``_settle``)
_SETTLE_LATER = Snapshot()
# what a handler raises on an event whose fields are not what it reads: an event the checks of
# ``events/spec.py`` let through (a peer's, a trace's) is ignored, not fatal to the UI
MALFORMED = (TypeError, ValueError, KeyError, AttributeError)
log = logging.getLogger(__name__)

# the backward of a reentrant checkpoint: it recomputes its forward and runs a nested pass
CHECKPOINTS = frozenset({"CheckpointFunctionBackward"})


def _related(value: Any) -> tuple[Related, ...]:
    items = []
    for raw in as_tuple(value):
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

    # True: an error in a handler raises (the tests set it, tests/conftest.py: a bug in a
    # handler must not pass for a malformed event there); False: the event is ignored, counted
    strict = False

    def __init__(self) -> None:
        self.ignored = 0  # events a handler could not read (``MALFORMED``), ignored
        self._snap = Snapshot()
        self._diagnosed: set[tuple[str, int | None, Any]] = set()
        self._zeroed_counts: dict[str, int] = {}
        self._leaf_norms: dict[str, float] = {}  # each leaf's latest norm
        # what snapshots see of it: a base taken at a pass's start and the changes since
        self._norms_base: Mapping[str, float] = MappingProxyType({})
        self._norms_when: dict[str, list[int]] = {}
        self._norms_value: dict[str, list[float]] = {}
        self._norms_count = 0
        # every pass that began and has not ended (and the shown one): several passes can run
        # at once, each on its own thread, and each keeps its own log
        self._views: dict[int, PassView] = {}
        # ended passes, oldest first, for stepping back (read by the UI thread: one tuple,
        # swapped whole); ``dropped`` counts the passes let go at the cap
        self.ended: tuple[PassView, ...] = ()
        self.dropped = 0
        self._kept: deque[PassView] = deque()
        self._kept_events = 0
        self.review_cap = REVIEW_EVENTS
        # reads a node event again from its line (the live reader's channel): records keep
        # the line, not the decoded event, when one is given
        self.reread: Callable[[bytes], Mapping[str, Any] | None] | None = None
        # pass -> records its view will see: node events applied and not yet in a snapshot
        self._pending: dict[int, int] = {}
        # every pass in brief (``leaves``, ``history``, ``trip``): the history view's (H),
        # read by the UI thread as a table; no snapshot is made for them
        self.brief = RunHistory()

    def snapshot(self) -> Snapshot:
        if self._pending:
            self._settle()
        return self._snap

    @property
    def stop(self) -> Stop | None:
        """The shown stop, as ``snapshot().stop`` (node events never change it: no snapshot
        is made for the question)."""
        return self._snap.stop

    def apply(self, event: Mapping[str, Any], line: bytes | None = None) -> bool:
        """Fold one event in; True if it changed what the UI shows. Never raises on bad input
        (unless ``strict``). ``line``: the text it was read from, if ``reread`` can read it
        again."""
        kind = event.get("event")
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            return False
        if self._pending and kind != "node":
            self._settle()  # every other event sees (and builds on) the nodes before it
        try:
            new = self._on_node(event, line) if kind == "node" else handler(event)
        except MALFORMED as exc:
            if self.strict:
                raise
            self.ignored += 1  # a malformed event: ignore it, keep the last good state
            log.debug("a %r event could not be read: %r", kind, exc)
            return False
        if new is None:
            return False
        if new is not _SETTLE_LATER:
            self._snap = replace(new, seq=self._snap.seq + 1)
        return True

    def _settle(self) -> None:
        """One snapshot for the node events applied since the last: each node made a new view
        and two snapshots (four copies), 6,380 a pass that ``f`` runs through unseen."""
        pending, self._pending = self._pending, {}
        for pass_number, done in pending.items():
            view = self._views.get(pass_number)
            if view is not None:
                self._snap = self._update(replace(view, done=done), running=True)
        self._snap = replace(self._snap, seq=self._snap.seq + 1)

    def _on_session(self, ev: Mapping[str, Any]) -> Snapshot:
        info = SessionInfo(
            version=ev.get("version") if isinstance(ev.get("version"), int) else None,
            torch=ev.get("torch") if isinstance(ev.get("torch"), str) else None,
            argv=tuple(str(a) for a in as_tuple(ev.get("argv"))),
            pid=ev.get("pid") if isinstance(ev.get("pid"), int) else None,
            eager=ev.get("eager") is True,
        )
        return replace(self._snap, session=info, running=True)

    def _on_process_group(self, ev: Mapping[str, Any]) -> Snapshot:
        session = self._snap.session or SessionInfo(version=None, torch=None, argv=(), pid=None)
        timeout = ev.get("timeout")
        info = replace(
            session,
            process_group=f"{ev.get('backend')} ({int(ev['world_size'])} ranks)",
            collective_timeout=float(timeout) if isinstance(timeout, (int, float)) else None,
        )
        return replace(self._snap, session=info)

    def _on_pass_begin(self, ev: Mapping[str, Any]) -> Snapshot:
        self._rebase_norms()
        view = PassView(
            number=int(ev["pass"]),
            parent=ev.get("parent") if isinstance(ev.get("parent"), int) else None,
            api=str(ev.get("api", "backward")),
            retain_graph=bool(ev.get("retain_graph")),
            create_graph=bool(ev.get("create_graph")),
            graph=Graph.build(ev.get("nodes"), ev.get("roots"), ev.get("leaves")),
            log=PassLog(),
            thread=ev.get("thread") if isinstance(ev.get("thread"), str) else None,
            before_provenance=ev.get("before_provenance") is True,
        )
        outer = self._views.get(view.parent) if view.parent is not None else None
        if outer is not None and any(n.name in CHECKPOINTS for n in outer.graph.nodes.values()):
            view = replace(view, recompute=True)
        self._views[view.number] = view
        snap = replace(self._snap, passes=max(self._snap.passes, view.number), running=True)
        stop = snap.stop
        if stop is not None and stop.thread != view.thread:
            # another thread is paused and shown: the new pass runs beside it, listed
            return self._with_live(snap)
        # nothing is paused, or the paused thread went on (a nested pass): show the new pass
        return self._with_live(self._show(replace(snap, stop=None), view))

    def _on_edit(self, ev: Mapping[str, Any]) -> Snapshot | None:
        """The person replaced a gradient at a stop: the pass is marked as edited."""
        view = self._current_pass(ev)
        if view is None:
            return None
        what = f"{as_str(ev.get('what')) or 'edit'} at {as_str(ev.get('name')) or '?'} #{ev.get('id')}"
        changed = ev.get("changed")
        if isinstance(changed, int) and not isinstance(changed, bool):
            if changed == 0:  # a value-for-value edit: nothing the program computed was replaced
                return None
            what += f" ({changed:,} value{'s' if changed != 1 else ''} changed)"
        return self._update(replace(view, edits=(*view.edits, what)))

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

    def _on_node(self, ev: Mapping[str, Any], line: bytes | None = None) -> Snapshot | None:
        view = self._current_pass(ev)
        if view is None or not isinstance(ev.get("id"), int):
            return None
        node_id = ev["id"]
        log = view.log
        done = self._pending.get(view.number, view.done)  # the view as the last node left it
        if node_id in log.records and log.records[node_id].index < done:
            return None  # duplicate
        # its gradients and saved list are made when first read: mostly never
        step = int(ev.get("step") or done + 1)
        record = LazyRecord.of(done, step, node_id, str(ev.get("name", "?")),
                               str(ev["error"]) if ev.get("error") else None, ev,
                               (line, self.reread) if line and self.reread else None)
        log.truncate(done)  # forget anything a newer snapshot never published
        log.executed.append(node_id)
        log.records[node_id] = record
        self._pending[view.number] = done + 1  # the view and snapshot: made by ``_settle``
        return _SETTLE_LATER

    def _on_region(self, ev: Mapping[str, Any]) -> Snapshot | None:
        view = self._current_pass(ev)
        found = region.from_event(ev) if view is not None else None
        if view is None or found is None or found.id not in view.graph.nodes:
            return None
        view.log.regions[found.id] = found
        return self._update(view)

    def _on_memory(self, ev: Mapping[str, Any]) -> None:
        """The pass's saved storages (the memory view, ``M``): kept in its log, shown from
        the next snapshot on (it comes right after ``pass_begin``, before any node)."""
        view = self._current_pass(ev)
        if view is not None and isinstance(ev.get("storages"), list):
            view.log.memory = dict(ev)

    def _on_accumulate(self, ev: Mapping[str, Any]) -> Snapshot | None:
        view = self._current_pass(ev)
        leaf = ev.get("leaf")
        if view is None or not isinstance(leaf, str):
            return None
        before = summary_of(ev.get("before"))
        after = summary_of(ev.get("after"))
        retained = bool(ev.get("retained"))
        zeroed = before is None or number(before.get("norm")) == 0.0
        count = 1 if zeroed else self._zeroed_counts.get(leaf, 1) + 1
        self._zeroed_counts[leaf] = count
        if after is not None:
            norm = number(after.get("norm"))
            if norm is not None:
                self._leaf_norms[leaf] = norm
                self._norms_when.setdefault(leaf, []).append(self._norms_count)
                self._norms_value.setdefault(leaf, []).append(norm)
                self._norms_count += 1
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
                            leaf_norms=self._norms())

    def _on_pass_end(self, ev: Mapping[str, Any]) -> Snapshot | None:
        view = self._current_pass(ev)
        if view is None or view.ended:
            return None
        skipped = frozenset(i for i in as_tuple(ev.get("skipped")) if isinstance(i, int))
        ended = replace(
            view,
            ended=True,
            status=str(ev.get("status", "ok")),
            error=str(ev["error"]) if ev.get("error") else None,
            skipped=skipped,
        )
        self._keep(ended)
        snap = self._update(ended)
        if snap.stop is not None and snap.stop.pass_ == ended.number:
            snap = replace(snap, stop=None)
        return self._with_live(snap)

    def restore_leaves(self, counts: Mapping[str, int], norms: Mapping[str, float]) -> None:
        """Start where earlier passes left the leaves (a replay opening a later pass): how many
        passes accumulated into each since it was zeroed, and its latest ``.grad`` norm."""
        self._zeroed_counts.update(counts)
        self._leaf_norms.update(norms)
        self._rebase_norms()
        self._snap = replace(self._snap, leaf_norms=self._norms(),
                             seq=self._snap.seq + 1)

    def _norms(self) -> LeafNorms:
        return LeafNorms(self._norms_base, self._norms_when, self._norms_value,
                         self._norms_count)

    def _rebase_norms(self) -> None:
        """Start a new history on a copy of the latest norms (once a pass: the history of a
        long session stays one pass long; older snapshots keep theirs)."""
        if self._norms_count or len(self._norms_base) != len(self._leaf_norms):
            self._norms_base = MappingProxyType(dict(self._leaf_norms))
            self._norms_when, self._norms_value, self._norms_count = {}, {}, 0

    def _keep(self, view: PassView) -> None:
        """Remember an ended pass for review, dropping the oldest beyond ``review_cap``."""
        kept = self._kept
        kept.append(view)
        self._kept_events += view.done + view.accumulated
        while len(kept) > 1 and self._kept_events > self.review_cap:
            old = kept.popleft()
            self._kept_events -= old.done + old.accumulated
            self.dropped += 1
        self.ended = tuple(kept)

    def _on_stopped(self, ev: Mapping[str, Any]) -> Snapshot:
        stop = Stop(
            pass_=int(ev["pass"]),
            step=int(ev.get("step") or 0),
            id=int(ev["id"]),
            name=str(ev.get("name", "?")),
            reason=str(ev.get("reason", "step")),
            detail=str(ev["detail"]) if ev.get("detail") else None,
            grad_outputs=summaries_of(ev.get("grad_outputs")),
            saved=saved_infos(ev.get("saved")),
            after=ev.get("after") is True,
            stop=as_int(ev.get("stop")),
            thread=as_str(ev.get("thread")),
            device=as_str(ev.get("device")),
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
        for raw in as_tuple(ev.get("stops")):
            if not isinstance(raw, dict) or as_int(raw.get("stop")) is None \
                    or as_int(raw.get("pass")) is None:
                continue
            items.append(Waiting(stop=raw["stop"], pass_=raw["pass"], step=as_int(raw.get("step")),
                                 id=as_int(raw.get("id")), name=str(raw.get("name", "?")),
                                 thread=as_str(raw.get("thread")), device=as_str(raw.get("device"))))
        return self._with_live(replace(self._snap, waiting=tuple(items)))

    def _on_diagnosis(self, ev: Mapping[str, Any]) -> Snapshot | None:
        severity = ev.get("severity")
        title = ev.get("title")
        diag = Diagnosis(
            pass_=ev.get("pass") if isinstance(ev.get("pass"), int) else None,
            kind=str(ev.get("kind", "?")),
            message=str(ev.get("message", "")),
            node=ev.get("node") if isinstance(ev.get("node"), int) else None,
            source=as_mapping(ev.get("source")),
            title=title if isinstance(title, str) else "",
            severity=severity if severity in SEVERITIES else "error",
            related=_related(ev.get("related")),
        )
        if diag.key in self._diagnosed:
            return None
        self._diagnosed.add(diag.key)
        return replace(self._snap, diagnoses=(*self._snap.diagnoses, diag))

    def _on_history(self, ev: Mapping[str, Any]) -> None:
        self.brief.add(dict(ev))

    _on_leaves = _on_trip = _on_history

    def _on_exit(self, ev: Mapping[str, Any]) -> Snapshot:
        code = ev.get("code")
        tb = ev.get("traceback")
        passes = ev.get("passes")
        info = ExitInfo(code=code if isinstance(code, int) else 1,
                        traceback=tb if isinstance(tb, str) and tb else None,
                        passes=passes if type(passes) is int and passes >= 0 else None)
        snap = self._snap
        last = max(self.ended, key=lambda v: v.number, default=None)
        if last is not None and (snap.pass_ is None or snap.pass_.number < last.number):
            snap = replace(snap, pass_=last)  # the script ended: its last pass held, not the first
        return replace(snap, exit=info, stop=None, running=False, waiting=(), live=())
