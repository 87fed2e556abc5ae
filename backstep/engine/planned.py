"""``backstep trace --every K / --when SPEC``: every pass in brief, the passes that matter in full.

A ``TracePlan`` decides, pass by pass, which passes a trace records node by node: one in
``every``, and around a trip of a ``--when`` spec the tripping pass (from the tripping node on)
and the next ``after`` passes, for at most ``trips`` trips. Every pass gets its ``history`` line
(``engine/history``) whatever is recorded.

The specs are armed exactly as ``run --break`` arms breakpoints: a ``TripController`` is a
controller that never waits for a person. Its ``pause`` answers at once: at a trip, "step" (the
capture then writes the pass from that node on, as a live stop does), and "continue" at the one
pre-hook stop that follows. Once the trips are spent it is no longer ``live``: no hooks at all.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from backstep.engine import naming
from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.history import History, graph_leaves_in
from backstep.engine.plan import TracePlan
from backstep.engine.recorder import Sink
from backstep.engine.torch_api import compile_tracing


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


_compile_tracing = compile_tracing(torch)


class PlannedCapture(Capture):
    """``Capture`` that follows a ``TracePlan`` and writes every pass's history."""

    def __init__(self, sink: Sink, plan: TracePlan) -> None:
        self.plan = plan
        controller = TripController(plan, sink) if plan.specs else None
        if controller is not None and plan.tensors and plan.trace_path is not None:
            from backstep.engine.trip_tensors import TripTensors

            controller.on_trip = TripTensors(plan.trace_path)
        super().__init__(sink, controller, record=True)
        self.history = History()

    def _run(self, original: Any, t_outputs: Any, args: tuple, kwargs: dict) -> Any:
        if torch.compiler.is_compiling() or _compile_tracing():
            return original(t_outputs, *args, **kwargs)
        number = self.passes + 1
        self.record = self.plan.full(number)
        controller = self.controller
        leaves: list[Any] | None = None
        if not (self.record or (controller is not None and controller.live())):
            try:  # a pass the capture will not hook: the history walks the graph itself
                leaves = self.history.before(t_outputs)
            except Exception:  # noqa: BLE001 - no history is never the script's problem
                leaves = []
        self._local.walked = None
        frame = sys._getframe(1)
        try:
            return super()._run(original, t_outputs, args, kwargs)
        finally:
            if leaves is None:  # the leaves of the graph the capture walked (``_end``)
                walked, self._local.walked = getattr(self._local, "walked", None), None
                try:
                    leaves = (graph_leaves_in(walked) if walked is not None
                              else self.history.before(t_outputs))
                except Exception:  # noqa: BLE001
                    leaves = []
            if kwargs.get("accumulate_grad", True) is False:
                leaves = []  # torch.autograd.grad leaves every .grad as it was
            try:
                events = self.history.after(number, t_outputs, leaves, naming.user_frame(frame))
                for event in events:
                    self._emit(event)
            except Exception:  # noqa: BLE001
                pass
            del frame

    def _end(self, p: Any, exc: BaseException | None) -> None:
        """Keep the pass's graph for its history (one walk of the graph a pass): the
        ``_run`` that follows at once on this thread takes them (a nested pass's first)."""
        walked = p.graph
        try:
            super()._end(p, exc)
        finally:
            self._local.walked = walked
