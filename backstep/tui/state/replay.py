"""Replaying a trace: the snapshots a live session would have shown, at any step, either way.

A live session that steps through every node sees, per node, a ``stopped`` event (paused before
the node runs) and then the node's own ``node`` event. A trace holds the node events; the
``stopped`` event is made from each one (the node's incoming gradients and saved tensors as they
were before it ran). Feeding that stream into the same ``SessionModel`` the live UI uses gives the
same snapshots, and since a snapshot only sees a prefix of its pass's append-only log, every
earlier one stays valid: stepping back is looking one up. One pass is in memory at a time, its
lines parsed only as far as the cursor has gone. Stdlib only (no textual, no torch).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

from backstep.events.breakpoints import Breakpoints, stopped_event
from backstep.traces.index import TraceIndex
from backstep.traces.limits import PassTooBig
from backstep.traces.passes import KIND_CODE, NODE_CODE
from backstep.tui.state.carry import Carry, CarryLog
from backstep.tui.state.graphlayout import layout_of
from backstep.tui.state.model import SessionModel
from backstep.tui.state.node_record import saved_infos
from backstep.tui.state.records import Graph, Stop, summaries_of
from backstep.tui.state.snapshot import Snapshot

BEGIN_CODE = KIND_CODE["pass_begin"]


@dataclass(frozen=True)
class Position:
    """A place in a trace: before node ``k`` (0-based, execution order) of pass ``number``;
    ``k == count`` is the pass's end. ``after`` marks a gradient breakpoint: just after node
    ``k`` ran."""

    number: int
    k: int
    after: bool = False


class PassTimeline:
    """One pass, fed to a fresh model a node at a time, as far as anyone has looked.

    Lines are parsed as the cursor reaches them, not all at once: opening a pass parses its
    ``pass_begin`` only, so a pass of thousands of nodes opens at once and holds no more than
    the model has been shown. A ``pass_begin`` listing more nodes than the pass's size allows
    (``traces/limits.py``) is not parsed: the pass is shown empty, ``refused`` says why."""

    def __init__(self, index: TraceIndex, number: int, carried: Carry) -> None:
        self.number = number
        self.index = index
        # the pass's lines are found as the cursor reaches them too: opening it reads its
        # pass_begin (where the scan found it) and finds its first node line only
        place = index.passes[number]
        self.count = place.steps
        self._lines = index.pass_lines(number, 1)
        lines = self._lines
        self.refused: str | None = None  # why the pass is not read (too many nodes listed)
        try:
            index.check_size(number, 1)  # before its pass_begin, the one line parsed whole
        except PassTooBig as exc:
            self.refused, self.count = str(exc), 0
        begin: dict[str, Any] = {}
        if len(lines.kinds) and lines.kinds[0] == BEGIN_CODE and self.refused is None:
            begin = index.event_at(lines.starts[0], lines.ends[0]) or {}
        self.thread = begin.get("thread")
        self.model = SessionModel()
        if index.session is not None:
            self.model.apply(index.session)
        carried.feed(self.model)
        # the model's graph is the pass's node table from here on: the parsed line is let go
        self.model.apply({**begin, "event": "pass_begin", "pass": number})
        view = self.model.snapshot().pass_
        self.graph = view.graph if view is not None else Graph.build([], [])
        self._next = 1 if begin else 0  # the next line to feed
        self._snaps: list[Snapshot] = []  # before node k
        self._end: Snapshot | None = None
        self._pending: dict[str, Any] | None = None  # the node event to apply after its stop
        self._parsed: tuple[int, dict[str, Any]] | None = None  # the last step parsed
        if self.refused is not None:  # nothing of it is read: its end is its start
            self._end = self.model.snapshot()

    def step(self, k: int) -> dict[str, Any]:
        """The ``node`` event of the ``k``-th node run (0-based), parsed from its line."""
        if self._parsed is not None and self._parsed[0] == k:
            return self._parsed[1]
        i = self._node_line(k)
        event = self._line(i)
        self._parsed = (k, event)
        return event

    def _node_line(self, k: int) -> int:
        """Which of the pass's lines is its ``k``-th node line (0-based)."""
        if k >= len(self._lines.nodes):
            self._lines = self.index.pass_lines(self.number, k + 1)
        return self._lines.nodes[k]

    def _more(self) -> bool:
        """Find the pass's lines up to its next node line; False when no more are left."""
        lines = self._lines
        if lines.complete:
            return False
        found = len(lines.kinds)
        self._lines = self.index.pass_lines(self.number, len(lines.nodes) + 1)
        return len(self._lines.kinds) > found

    def _line(self, i: int) -> dict[str, Any]:
        lines = self._lines
        event = self.index.event_at(lines.starts[i], lines.ends[i])
        if event is None and lines.kinds[i] == NODE_CODE:  # unreadable: keep its place
            event = {"event": "node", "pass": self.number, "id": -1 - i,
                     "name": "(unreadable line)", "grad_outputs": None, "grad_inputs": None,
                     "saved": [], "error": self.index.rejected.get(
                         lines.starts[i], "this line of the trace could not be read")}
        return event or {}

    def _stop_event(self, k: int, event: dict[str, Any], reason: str) -> dict[str, Any]:
        return stopped_event(self.number, event.get("step") or k + 1, event["id"],
                             event.get("name"), reason, None, event.get("grad_outputs"),
                             event.get("saved"), thread=self.thread, stop=k + 1)

    def _advance(self) -> None:
        """Feed events until one more stop (or the end) has a snapshot."""
        if self._pending is not None:
            self.model.apply(self._pending)
            self._pending = None
        while self._next < len(self._lines.kinds) or self._more():
            i = self._next
            self._next += 1
            kinds = self._lines.kinds
            if kinds[i] == BEGIN_CODE:
                continue
            event = self._line(i)
            if kinds[i] == NODE_CODE:
                # made once for both events: the stop and the node's record share them
                for key in ("grad_outputs", "grad_inputs"):
                    if isinstance(event.get(key), list):
                        event[key] = summaries_of(event[key])
                event["saved"] = saved_infos(event.get("saved"))
                k = len(self._snaps)
                self.model.apply(self._stop_event(k, event, "pass_start" if k == 0 else "step"))
                self._snaps.append(self.model.snapshot())
                self._pending = event
                return
            self.model.apply(event)
        self._end = self.model.snapshot()

    def at(self, k: int) -> Snapshot:
        """The snapshot before node ``k`` runs (``k == count``: after the pass)."""
        while len(self._snaps) <= k and self._end is None:
            self._advance()
        if k < len(self._snaps):
            return self._snaps[k]
        return self._end if self._end is not None else self.model.snapshot()

    def stop_after(self, k: int, reason: str, detail: str | None) -> Snapshot:
        """Just after node ``k`` ran, stopped by a gradient breakpoint (as live shows it)."""
        snap = self.at(k + 1)
        event = self.step(k)
        stop = Stop(pass_=self.number, step=event.get("step") or k + 1, id=event["id"],
                    name=str(event.get("name")), reason=reason, detail=detail,
                    grad_outputs=summaries_of(event.get("grad_outputs")),
                    saved=saved_infos(event.get("saved")), after=True, stop=-(k + 1),
                    thread=self.thread)
        return replace(snap, stop=stop, running=False)


class Replay:
    """A cursor over a whole trace. ``snapshot()`` is what the UI shows at the cursor."""

    def __init__(self, index: TraceIndex) -> None:
        self.index = index
        numbers = index.numbers()
        self.position: Position | None = Position(numbers[0], 0) if numbers else None
        self._timeline: PassTimeline | None = None
        self._ahead: dict[int, PassTimeline] = {}  # the next and previous passes, opened idle
        self._heading = 1  # the way the cursor last went from pass to pass
        self.carries = CarryLog(index)
        self._reason: tuple[str, str | None] | None = None
        self._seq = 0

    def _all(self) -> None:
        """Index the rest of the file now (a move past what a partial index has seen)."""
        if not self.index.done:
            self.index.scan()

    @property
    def numbers(self) -> list[int]:
        """The passes indexed so far (all of them once the index is done)."""
        return self.index.numbers()

    # -- state ---------------------------------------------------------------------------

    def timeline(self, number: int) -> PassTimeline:
        if self._timeline is None or self._timeline.number != number:
            ahead = self._ahead.pop(number, None)
            old, self._timeline = self._timeline, None
            if old is not None and len(old._snaps) <= 1:  # left at its start: kept as opened
                self._ahead[old.number] = old
            old = None  # one pass in memory at a time (and its neighbours opened)
            self._timeline = ahead or PassTimeline(self.index, number, self._carry(number))
            i = bisect.bisect_left(self.numbers, number)
            beside = set(self.numbers[max(i - 1, 0):i + 2])
            for other in [n for n in self._ahead if n not in beside]:
                del self._ahead[other]
        return self._timeline

    def prepare(self) -> bool:
        """Open the next pass, then the previous one, ahead: at its first stop, its graph laid
        out, while the person reads this one (the UI calls it when idle): ] and [ then only
        redraw. One pass per call; False when there is nothing left to open."""
        pos = self.position
        if pos is None:
            return False
        i = bisect.bisect_left(self.numbers, pos.number)
        for j in (i + self._heading, i - self._heading):  # the way the person is going first
            if not 0 <= j < len(self.numbers):
                continue
            number = self.numbers[j]
            if number in self._ahead or not self.index.passes[number].complete:
                continue
            ahead = PassTimeline(self.index, number, self._carry(number))
            ahead.at(0)
            layout_of(ahead.graph)
            self._ahead[number] = ahead
            return True
        return False

    def _carry(self, number: int) -> Carry:
        """What earlier passes leave behind (folded once, remembered every few passes)."""
        return self.carries.before(number)

    def offset(self) -> int:
        """Where in the file the cursor is: the script's output before it was printed before
        the node shown (or, at a pass's end, before the next pass began)."""
        pos = self.position
        if pos is None:
            return 0
        passes = self.index.passes
        k = pos.k + 1 if pos.after else pos.k
        lines = self.index.pass_lines(pos.number, k + 1)
        if k < len(lines.nodes):
            return lines.starts[lines.nodes[k]]
        end = passes[pos.number].last
        later = [passes[n].first for n in self.numbers if n > pos.number]
        if not later:
            return self.index.size() if self.index.done else end
        return max(end, later[0])

    def snapshot(self) -> Snapshot:
        self._seq += 1
        if self.position is None:
            return Snapshot(seq=self._seq)
        line = self.timeline(self.position.number)
        if self.position.after and self._reason is not None:
            snap = line.stop_after(self.position.k, *self._reason)
        else:
            snap = line.at(self.position.k)
            if self._reason is not None and snap.stop is not None:
                snap = replace(snap, stop=replace(snap.stop, reason=self._reason[0],
                                                  detail=self._reason[1]))
        return replace(snap, seq=self._seq)

    # -- moving ----------------------------------------------------------------------------

    def _go(self, position: Position, reason: tuple[str, str | None] | None = None) -> bool:
        if self.position is not None and position.number != self.position.number:
            self._heading = 1 if position.number > self.position.number else -1
        self.position, self._reason = position, reason
        return True

    def step(self, delta: int) -> bool:
        """One node forward (1) or back (-1), across pass boundaries. False at either end."""
        pos = self.position
        if pos is None:
            return False
        if pos.after:  # just after node k is where "before node k+1" is, one step on
            k = pos.k + 1 if delta > 0 else pos.k
        else:
            k = pos.k + delta
        i = self.numbers.index(pos.number)
        if k > self.timeline(pos.number).count:
            if i + 1 >= len(self.numbers):
                self._all()
            if i + 1 >= len(self.numbers):
                return False
            return self._go(Position(self.numbers[i + 1], 0))
        if k < 0:
            if i == 0:
                return False
            number = self.numbers[i - 1]
            return self._go(Position(number, self.timeline(number).count))
        return self._go(Position(pos.number, k))

    def jump(self, number: int, step: int | None = None) -> bool:
        """To pass ``number``, before its node of step ``step`` (1-based; None: the start)."""
        if number not in self.index.passes:
            self._all()
        if number not in self.index.passes:
            return False
        count = self.timeline(number).count
        k = 0 if step is None else min(max(step - 1, 0), count)
        return self._go(Position(number, k))

    def stop_at(self, number: int, step: int, reason: str) -> bool:
        """Just after the node of step ``step`` (1-based) of pass ``number`` ran, stopped
        for ``reason`` (``show --against``: where the difference from B is born)."""
        if not self.jump(number, step) or self.position is None:
            return False
        if self.position.k >= self.timeline(number).count:
            return True
        return self._go(Position(number, self.position.k, True), (reason, None))

    def pass_(self, delta: int) -> bool:
        """To the start of the next (1) or previous (-1) pass; back from inside a pass goes to
        its own start first."""
        if self.position is None:
            return False
        if delta < 0 and (self.position.k > 0 or self.position.after):
            return self._go(Position(self.position.number, 0))
        i = self.numbers.index(self.position.number) + delta
        if i >= len(self.numbers):
            self._all()
        if not 0 <= i < len(self.numbers):
            return False
        return self._go(Position(self.numbers[i], 0))

    def find(self, breakpoints: list[dict[str, Any]], direction: int,
             stop_at_pass_start: bool = True) -> bool:
        """Continue forward (1) or backward (-1) to the next stop a live ``c`` would make:
        a breakpoint, or the start of a pass. False when there is none (the cursor stays)."""
        pos = self.position
        if pos is None:
            return False
        if direction > 0:
            self._all()
        rules = Breakpoints.from_list(breakpoints)  # the matcher a live session uses
        i = self.numbers.index(pos.number)
        order = self.numbers[i:] if direction > 0 else self.numbers[i::-1]
        for number in order:
            line = self.timeline(number)
            ks = range(line.count) if direction > 0 else range(line.count - 1, -1, -1)
            for k in ks:
                for after in ((False, True) if direction > 0 else (True, False)):
                    here = Position(number, k, after)
                    if not _beyond(here, pos, direction):
                        continue
                    reason = self._trip(line, k, after, rules, stop_at_pass_start)
                    if reason is not None:
                        return self._go(here, reason)
        return False

    def _trip(self, line: PassTimeline, k: int, after: bool, rules: Breakpoints,
              stop_at_pass_start: bool) -> tuple[str, str | None] | None:
        event = line.step(k)
        if after:
            return rules.trip_on_summaries(event.get("grad_inputs"))
        info = line.graph.nodes.get(event["id"])
        why = (rules.match_node(str(event.get("name")), event.get("module"), event.get("leaf"))
               if info is None else rules.match_node(info.name, info.module, info.leaf))
        if why is not None:
            return "breakpoint", why
        if k == 0 and stop_at_pass_start:
            return "pass_start", None
        return None


def _beyond(here: Position, pos: Position, direction: int) -> bool:
    a = (here.k, here.after)
    b = (pos.k, pos.after)
    if here.number != pos.number:
        return True
    return a > b if direction > 0 else a < b
