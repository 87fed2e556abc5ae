"""Every pass in brief, whatever else is recorded: a ``Capture`` that writes each pass's
``leaves`` / ``history`` events (``engine/history``) once it ran. A live session's (``run``,
``attach()``: the UI's history view, ``H``) and ``trace``'s (``engine/planned`` decides on top
of it which passes are written in full).

The pass runs exactly as it would without it: the leaves are those of the graph the capture
walks for the pass (or, for a pass it does not hook, of a walk before it runs; no hook), the reductions run after it under ``no_grad`` on the gradients as
they are, and any failure only costs the pass its history line.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from backstep.engine import naming
from backstep.engine.capture import Capture
from backstep.engine.history import History, graph_leaves_in
from backstep.engine.torch_api import compile_tracing

_compile_tracing = compile_tracing(torch)


class BriefedCapture(Capture):
    """``Capture`` that writes every pass's history after it."""

    def __init__(self, sink: Any, controller: Any = None, *, record: bool = True) -> None:
        super().__init__(sink, controller, record=record)
        self.history = History()

    def before_pass(self, number: int) -> None:
        """Pass ``number`` is about to run (``PlannedCapture``: is it written in full?)."""

    def _run(self, original: Any, t_outputs: Any, args: tuple, kwargs: dict) -> Any:
        if torch.compiler.is_compiling() or _compile_tracing() or self.sink is None:
            return super()._run(original, t_outputs, args, kwargs)
        number = self.passes + 1
        self.before_pass(number)
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
