"""``backstep trace --every K / --when SPEC``: every pass in brief, the passes that matter in full.

A ``TracePlan`` decides, pass by pass, which passes a trace records node by node: one in
``every``, and around a trip of a ``--when`` spec the tripping pass (from the tripping node on)
and the next ``after`` passes, for at most ``trips`` trips. Every pass gets its ``history`` line
(``engine/briefed``) whatever is recorded.

The specs are armed exactly as ``run --break`` arms breakpoints: a ``TripController`` is a
controller that never waits for a person. Its ``pause`` answers at once: at a trip, "step" (the
capture then writes the pass from that node on, as a live stop does), and "continue" at the one
pre-hook stop that follows. Once the trips are spent it is no longer ``live``: no hooks at all.
"""

from __future__ import annotations

from typing import Any

from backstep.engine.briefed import BriefedCapture
from backstep.engine.controller import Controller
from backstep.engine.plan import TracePlan
from backstep.engine.recorder import Sink


class TripController(Controller):
    """The ``--when`` specs, armed as breakpoints, answered without a person."""

    def __init__(self, plan: TracePlan, sink: Sink) -> None:
        super().__init__(lambda event: None, plan.specs, stop_at_pass_start=False)
        self.plan = plan
        self.sink = sink
        self.on_trip: Any = None  # (trip event, pass, console) -> None: ``--tensors``

    def live(self) -> bool:
        return self.plan.armed and super().live()

    def pause(self, stopped: dict[str, Any], on: Any, console: Any = None) -> str:
        if stopped.get("reason") in ("step", "pass_start", "interrupt"):
            return "continue"  # the pre-hook stop that follows a trip
        number = stopped.get("pass")
        trip = self.plan.trip(number) if isinstance(number, int) else None
        if trip is None:
            return "continue"
        event = {"event": "trip", "n": number, "trip": trip, "step": stopped.get("step"),
                 "id": stopped.get("id"), "name": stopped.get("name"),
                 "reason": stopped.get("reason"), "detail": stopped.get("detail"),
                 "tensors": None}
        if self.on_trip is not None:
            try:
                event["tensors"] = self.on_trip(event, on, console)
            except Exception:  # noqa: BLE001 - saving tensors never breaks the pass
                event["tensors"] = None
        self.sink.emit(event)
        return "step"


class PlannedCapture(BriefedCapture):
    """``BriefedCapture`` that follows a ``TracePlan``: every pass's history, some in full."""

    def __init__(self, sink: Sink, plan: TracePlan) -> None:
        self.plan = plan
        controller = TripController(plan, sink) if plan.specs else None
        if controller is not None and plan.tensors and plan.trace_path is not None:
            from backstep.engine.trip_tensors import TripTensors

            controller.on_trip = TripTensors(plan.trace_path)
        super().__init__(sink, controller, record=True)

    def before_pass(self, number: int) -> None:
        self.record = self.plan.full(number)
