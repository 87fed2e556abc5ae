"""Which passes ``backstep trace`` writes in full (``--every``, ``--when``, ``--after``,
``--trips``): the plan, checked before the script runs. Stdlib only: ``trace`` checks its options
without importing torch (the capture that follows the plan is ``engine/planned``)."""

from __future__ import annotations

import copy
import threading
from typing import Any

from backstep.events.breakpoints import parse_breakpoint
from backstep.protocol import ProtocolError


class PlanError(ValueError):
    """A bad ``--every`` / ``--when`` / ``--after`` / ``--trips``: its one line."""


class TracePlan:
    """Which passes are recorded in full; the trips so far."""

    def __init__(self, every: int | None = None, when: list[str] | None = None,
                 after: int = 1, trips: int = 3, tensors: bool = False) -> None:
        if every is not None and every < 1:
            raise PlanError(f"--every needs a whole number of passes >= 1, not {every}")
        if after < 0:
            raise PlanError(f"--after needs a number of passes >= 0, not {after}")
        if trips < 1:
            raise PlanError(f"--trips needs a number >= 1, not {trips}")
        if tensors and not when:
            raise PlanError("--tensors saves the tensors of a --when trip: give --when SPEC too")
        self.specs: list[dict[str, Any]] = []
        for spec in when or ():
            try:
                self.specs.append(parse_breakpoint(spec))
            except ProtocolError as exc:
                raise PlanError(f"--when {spec}: {exc}") from None
        # without --when every pass is recorded unless --every says otherwise
        self.every = every if every is not None else (None if self.specs else 1)
        self.after = after
        self.trips = trips
        self.tensors = tensors  # save each trip's tensors beside the trace (engine/trip_tensors)
        self.trace_path: str | None = None  # the trace's file, once known (its rank's)
        self.tripped = 0
        self.pending = 0  # passes still to record in full after a trip
        self.tripped_pass: int | None = None
        self._lock = threading.Lock()

    def fresh(self) -> TracePlan:
        """The same options, no trip yet: a forked child's trace (``--children``) follows the
        plan from its own first pass, its file being its own, with a lock of its own (one
        copied at the fork may be held by a thread the child does not have)."""
        plan = copy.copy(self)
        plan.specs = [dict(spec) for spec in self.specs]
        plan.tripped, plan.pending, plan.tripped_pass = 0, 0, None
        plan._lock = threading.Lock()
        return plan

    @property
    def armed(self) -> bool:
        return bool(self.specs) and self.tripped < self.trips

    def full(self, number: int) -> bool:
        """Is pass ``number`` (about to start) recorded in full?"""
        with self._lock:
            if self.pending > 0 and number != self.tripped_pass:
                self.pending -= 1
                return True
        return self.every is not None and (number - 1) % self.every == 0

    def trip(self, number: int) -> int | None:
        """A spec tripped in pass ``number``: the trip's number (from 1), or None when this
        pass has tripped already or the trips are spent."""
        with self._lock:
            if number == self.tripped_pass or self.tripped >= self.trips:
                return None
            self.tripped += 1
            self.tripped_pass = number
            self.pending = self.after
            return self.tripped
