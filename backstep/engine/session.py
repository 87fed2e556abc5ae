"""What every debuggee does around the user's script: announce the session, install capture and
provenance, and make sure events reach their sink even when the script ends with ``os._exit``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from backstep import protocol
from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.recorder import Sink


def session_event(argv: list[str]) -> dict[str, Any]:
    return {
        "event": "session",
        "version": protocol.VERSION,
        "torch": torch.__version__,
        "argv": list(argv),
        "pid": os.getpid(),
        "python": sys.version.split()[0],
    }


class Session:
    """Capture (and provenance, unless turned off) installed for the life of a script."""

    def __init__(self, sink: Sink, controller: Controller | None = None, *, record: bool = True,
                 source: bool = True) -> None:
        self.sink = sink
        self.capture = Capture(sink, controller, record=record)
        self.provenance: Any = None
        if source:
            try:
                from backstep.engine.provenance import Provenance

                self.provenance = Provenance()
            except ImportError:
                self.provenance = None
        self._real_exit: Callable[[int], Any] | None = None

    def __enter__(self) -> Session:
        self.capture.install()
        if self.provenance is not None:
            self.provenance.install()
        self._real_exit = os._exit
        real_exit, sink = os._exit, self.sink

        def _exit(code: int) -> Any:  # the trace must survive os._exit
            sink.emit({"event": "exit", "code": code, "traceback": None})
            sink.flush()
            real_exit(code)

        os._exit = _exit
        return self

    def __exit__(self, *exc: object) -> None:
        if self._real_exit is not None:
            os._exit = self._real_exit
        if self.provenance is not None:
            self.provenance.uninstall()
        self.capture.uninstall()
        self.sink.flush()
