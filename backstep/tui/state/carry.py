"""What earlier passes of a trace leave behind for a later one: each leaf's ``.grad`` state.

A pass opened in a replay starts from where the passes before it left the leaves (how many
passes have accumulated into each since it was zeroed, and its latest norm) and the diagnoses so
far. That is a fold over every earlier pass's ``accumulate`` lines: seconds for hundreds of
passes. ``CarryLog`` folds each pass once, in pass order, in slices while the UI idles (or on
demand), and remembers the state after each pass as three flat arrays (13 bytes per leaf, no
events), so opening any pass folds nothing. Past ``MARKS_BUDGET`` bytes of remembered states
(thousands of passes of hundreds of leaves) only every 2nd, then 4th, ... is kept: opening a
pass then folds at most ``every - 1`` passes. Stdlib only.
"""

from __future__ import annotations

import bisect
import math
import time
from array import array
from dataclasses import dataclass
from typing import Any

from backstep.traces.index import TraceIndex
from backstep.tui.state.model import SessionModel
from backstep.tui.state.records import number as number_of

MARKS_BUDGET = 4 * 1024 * 1024  # bytes of remembered states, beyond which fewer are kept
KINDS = {"accumulate", "diagnosis"}


@dataclass(frozen=True)
class Carry:
    """What the model keeps from earlier passes: how many passes have accumulated into each
    leaf since it was zeroed and its latest ``.grad`` norm, and the diagnoses so far."""

    leaves: tuple[tuple[str, int, float | None], ...] = ()
    diagnoses: tuple[dict[str, Any], ...] = ()

    def feed(self, model: SessionModel) -> None:
        """Bring a fresh model to where it was after the passes folded into this carry."""
        if self.leaves:
            model.restore_leaves({leaf: count for leaf, count, _ in self.leaves},
                                 {leaf: norm for leaf, _, norm in self.leaves if norm is not None})
        for event in self.diagnoses:
            model.apply(event)


class _State:
    """The fold's running state, one slot per leaf (slots shared through ``names``)."""

    def __init__(self, names: list[str], slots: dict[str, int]) -> None:
        self.names, self.slots = names, slots
        self.counts = array("i")
        self.norms = array("d")
        self.seen = bytearray()  # 0: not yet accumulated, 1: no norm yet, 2: has a norm
        self.diagnoses = 0  # how many of the log's diagnoses are folded in

    def nbytes(self) -> int:
        """About what the state holds in memory (its arrays and their objects)."""
        return 13 * len(self.seen) + 300

    def copy(self) -> _State:
        state = _State(self.names, self.slots)
        state.counts, state.norms = array("i", self.counts), array("d", self.norms)
        state.seen, state.diagnoses = bytearray(self.seen), self.diagnoses
        return state

    def fold(self, events: list[dict[str, Any]], diagnoses: list[dict[str, Any]] | None) -> None:
        """Fold one pass's events in; its diagnoses go onto ``diagnoses`` (None: already
        logged, only counted)."""
        for event in events:
            if event.get("event") == "diagnosis":
                if diagnoses is not None:
                    diagnoses.append(event)
                self.diagnoses += 1
                continue
            leaf = event.get("leaf")
            if not isinstance(leaf, str):
                continue
            slot = self.slots.get(leaf)
            if slot is None:
                slot = self.slots[leaf] = len(self.names)
                self.names.append(leaf)
            while len(self.seen) <= slot:
                self.counts.append(1)
                self.norms.append(0.0)
                self.seen.append(0)
            before, after = event.get("before"), event.get("after")
            zeroed = not isinstance(before, dict) or number_of(before.get("norm")) == 0.0
            count = 1 if self.seen[slot] == 0 else self.counts[slot]
            self.counts[slot] = 1 if zeroed else count + 1
            norm = number_of(after.get("norm")) if isinstance(after, dict) else None
            if norm is not None:
                self.norms[slot] = norm
                self.seen[slot] = 2
            elif self.seen[slot] == 0:
                self.seen[slot] = 1

    def carry(self, diagnoses: list[dict[str, Any]]) -> Carry:
        leaves = tuple((self.names[i], self.counts[i], self.norms[i] if seen == 2 else None)
                       for i, seen in enumerate(self.seen) if seen)
        return Carry(leaves, tuple(diagnoses[: self.diagnoses]))


class CarryLog:
    """Each pass's carry, folded once in pass order and remembered every ``every`` passes (1
    until the remembered states outgrow ``MARKS_BUDGET``, then 2, 4, ...)."""

    def __init__(self, index: TraceIndex) -> None:
        self.index = index
        self._names: list[str] = []
        self._slots: dict[str, int] = {}
        self._diagnoses: list[dict[str, Any]] = []
        self._state = _State(self._names, self._slots)  # after the first ``_folded`` passes
        self._folded = 0
        self._marks: dict[int, _State] = {0: self._state.copy()}  # passes folded -> state
        self._marks_bytes = self._marks[0].nbytes()
        self.every = 1  # passes between remembered states
        # states folded lately between marks (every > 1), kept too: ] folds one pass onto the
        # last one, and [ back from a pass finds the state before it among those folded on the
        # way to it; the last few asked for, oldest first
        self._recent: dict[int, _State] = {}
        # while the file is still being indexed, the scan hands over each pass's accumulate
        # and diagnosis lines as it finds them, and a pass is folded when it ends: no pass
        # is looked for twice. Passes indexed before this are read from the file.
        self._from = index.scanned
        self._lines: dict[int, array[int]] = {}  # start, end, start, end, ...
        if not index.done:
            index.watch = self._watch

    def _watch(self, kind: str, number: int, start: int, end: int) -> None:
        if kind in KINDS:
            self._lines.setdefault(number, array("q")).extend((start, end))
        elif kind == "pass_end":
            self.work(None)

    def _events(self, number: int) -> list[dict[str, Any]]:
        """One pass's accumulate and diagnosis events, in order."""
        lines = self._lines.pop(number, None)
        if self.index.passes[number].first < self._from:
            return self.index.read_kinds(number, KINDS)
        events = []
        for i in range(0, len(lines) if lines is not None else 0, 2):
            event = self.index.event_at(lines[i], lines[i + 1])  # type: ignore[index]
            if event is not None:
                events.append(event)
        return events

    @property
    def done(self) -> bool:
        """Every pass of a wholly indexed file is folded."""
        return self.index.done and self._folded >= len(self.index.numbers())

    def _foldable(self, i: int) -> bool:
        numbers = self.index.numbers()
        return i < len(numbers) and (self.index.done or self.index.passes[numbers[i]].complete)

    def _fold_next(self) -> None:
        number = self.index.numbers()[self._folded]
        self._state.fold(self._events(number), self._diagnoses)
        self._folded += 1
        if self._folded % self.every == 0:
            mark = self._marks[self._folded] = self._state.copy()
            self._marks_bytes += mark.nbytes()
            if self._marks_bytes > MARKS_BUDGET:
                self._thin()

    def _thin(self) -> None:
        """Keep every other remembered state: twice as many passes between them."""
        self.every *= 2
        for k in [k for k in self._marks if k % self.every]:
            self._marks_bytes -= self._marks.pop(k).nbytes()

    def work(self, budget: float | None) -> bool:
        """Fold passes for about ``budget`` seconds (None: all that can be); True when all
        are."""
        end = math.inf if budget is None else time.perf_counter() + budget
        while self._foldable(self._folded):
            self._fold_next()
            if time.perf_counter() >= end:
                break
        if self.index.done:
            self.index.watch = None
        return self.done

    def before(self, number: int) -> Carry:
        """What the passes before pass ``number`` (in number order) leave behind."""
        numbers = self.index.numbers()
        count = bisect.bisect_left(numbers, number)  # passes to fold
        if not self.index.done and (count == len(numbers) or not all(
                self._foldable(i) for i in range(self._folded, count))):
            self.index.scan()  # passes not (wholly) indexed yet: index the rest first
            numbers = self.index.numbers()
            count = bisect.bisect_left(numbers, number)
        while self._folded < count:  # the running fold catches up (remembering as it goes)
            self._fold_next()
        if count == self._folded:
            return self._state.carry(self._diagnoses)
        start = count - count % self.every
        near = [k for k in self._recent if start <= k <= count]  # ] from the pass before
        start = max(near, default=start)
        state = (self._recent[start] if start in self._recent else self._marks[start]).copy()
        for i in range(start, count):
            state.fold(self.index.read_kinds(numbers[i], KINDS), None)
            # the states on the way are kept too: [ back from this pass folds nothing
            self._recent.pop(i + 1, None)
            self._recent[i + 1] = state if i + 1 == count else state.copy()
        while len(self._recent) > self.every + 1:
            del self._recent[next(iter(self._recent))]
        return state.carry(self._diagnoses)
