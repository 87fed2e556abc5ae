"""``attach(trace=...)`` (or BACKSTEP_TRACE): no UI, every pass from then on recorded to a
JSON-lines file, as ``backstep trace`` would."""

from __future__ import annotations

import atexit
import sys
from typing import Any

from backstep.process.attach.base import Attachment


class TraceAttachment(Attachment):
    """No UI: every pass from here on is recorded to a JSON-lines file."""

    def __init__(self, path: str, source: bool) -> None:
        super().__init__(source)
        self.path = path
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
        self.stream = open(self.path, "wb")  # noqa: SIM115 - closed by stop() or at exit
        self.recorder = JsonlRecorder(self.stream)
        self.recorder.emit(session_event(list(sys.argv)))
        self._arm(self.recorder, None, record=True)
        atexit.register(self.stop)

    def _abandon(self) -> None:
        atexit.unregister(self.stop)
        if self.recorder is not None:
            self.recorder.abandon()
        self.stream = None

    def stop(self) -> None:
        if self.stream is None:
            return
        self._disarm()
        cut = self.recorder.close()
        if cut is not None:
            print(cut, file=sys.stderr)
        self.stream = None
