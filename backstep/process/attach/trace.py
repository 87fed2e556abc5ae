"""``attach(trace=...)`` (or BACKSTEP_TRACE): no UI, every pass from then on recorded to a
JSON-lines file, as ``backstep trace`` would."""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

from backstep.process.attach.base import Attachment


class TraceAttachment(Attachment):
    """No UI: every pass from here on is recorded to a JSON-lines file."""

    def __init__(self, path: str, source: bool, plan: Any = None) -> None:
        super().__init__(source)
        self.path = path
        self.plan = plan  # engine/plan.TracePlan: every/when/after/trips
        self.stream: Any = None
        self.recorder: Any = None

    def start(self) -> None:
        from backstep.engine.recorder import JsonlRecorder
        from backstep.engine.session import session_event
        from backstep.process import ranks

        here = ranks.from_environment()  # under torchrun: one file per rank, as for trace -o
        template = self.path
        self.path, inserted = ranks.trace_path(template, here)
        if inserted:
            ranks.say_inserted("backstep", template, here)
        if self.plan is not None:
            self.plan.trace_path = os.path.abspath(self.path)  # tensors=True: beside it
        self.stream = open(self.path, "wb")  # noqa: SIM115 - closed by stop() or at exit
        from backstep.traces.compressed import GzipTrace, wants_gzip

        if wants_gzip(self.path):
            self.stream = GzipTrace(self.stream)
        self.recorder = JsonlRecorder(self.stream)
        self.recorder.emit(session_event(list(sys.argv)))
        self._arm(self.recorder, None, record=True, plan=self.plan)
        atexit.register(self.stop)
        from backstep.process.on_term import close_on_sigterm

        recorder = self.recorder

        def on_sigterm() -> None:  # the file stays valid when the job is killed
            recorder.emit(self.exit_event(-15))
            recorder.close()

        self._undo_sigterm = close_on_sigterm(on_sigterm)

    def _abandon(self) -> None:
        atexit.unregister(self.stop)
        if self.recorder is not None:
            self.recorder.abandon()
        self.stream = None

    def stop(self) -> None:
        if self.stream is None:
            return
        undo = getattr(self, "_undo_sigterm", None)
        if undo is not None:
            undo()
        self._disarm()
        cut = self.recorder.close()
        if cut is not None:
            print(cut, file=sys.stderr)
        self.stream = None
