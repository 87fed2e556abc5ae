"""What every kind of attachment does in this process: install capture, diagnostics and
provenance for as long as it is active, and disarm silently in a forked child. The kinds are
``terminal.py``, ``remote.py`` (and ``served.py`` on top of it) and ``trace.py``."""

from __future__ import annotations

from typing import Any

from backstep.process.attach import registry


class Attachment:
    """Capture and provenance installed in this process for as long as it is active."""

    def __init__(self, source: bool) -> None:
        self.source = source
        self.active = False
        self.capture: Any = None
        self.provenance: Any = None
        self.diagnostician: Any = None
        self._unfork: Any = None

    def _arm(self, sink: Any, controller: Any, record: bool, plan: Any = None) -> None:
        from backstep.engine.capture import Capture
        from backstep.engine.diagnostics import Diagnostician
        from backstep.process import forks

        self._unfork = forks.on_fork_child(self._after_fork)

        self.diagnostician = Diagnostician(sink)
        self.diagnostician.install()
        if plan is not None:  # attach(trace=..., every/when=...): engine/planned
            from backstep.engine.planned import PlannedCapture

            self.capture = PlannedCapture(self.diagnostician, plan)
        elif controller is not None:  # a live UI: every pass in brief too (its H)
            from backstep.engine.briefed import BriefedCapture

            self.capture = BriefedCapture(self.diagnostician, controller, record=record)
        else:
            self.capture = Capture(self.diagnostician, controller, record=record)
        self.capture.install()
        if self.source:
            from backstep.engine.provenance import Provenance, annotate

            self.provenance = Provenance()
            self.provenance.install()
            self.capture.annotate = annotate
            self.capture.tagged_since = self.provenance.since
        self.active = True

    def exit_event(self, code: int) -> dict[str, Any]:
        """The ``exit`` event this attachment announces: how many passes ran, as ``trace`` says."""
        passes = self.capture.passes if self.capture is not None else None
        return {"event": "exit", "code": code, "traceback": None, "passes": passes}

    def _after_fork(self) -> None:
        """In a forked child (a DataLoader worker...): disarm without a word to the UI or the
        trace, forget the parent's UI and files, and let a later attach() start afresh."""
        registry.forget_after_fork()
        self._unfork = None
        if self.capture is not None:
            self.capture.sink = self.capture.controller = None
            self.capture._released_queue = []
        self._disarm()
        self._abandon()

    def _abandon(self) -> None:
        """Let go of what the parent owns, without flushing, shutting down or locking."""

    def _disarm(self) -> None:
        self.active = False
        if self._unfork is not None:
            self._unfork()
            self._unfork = None
        if self.provenance is not None:
            self.provenance.uninstall()
            self.provenance = None
        if self.capture is not None:
            self.capture.uninstall()
            self.capture = None
        if self.diagnostician is not None:
            self.diagnostician.uninstall()
            self.diagnostician = None

    def elsewhere(self) -> bool:
        """Whether a new ``attach()`` should replace this one rather than keep it: its UI is
        shown where the person is no longer looking (a notebook cell other than the one
        running). Only a served attachment ever is."""
        return False

    def start(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """``detach()``: disarm; only a served UI's page outlives it (``served.py``)."""
        self.stop()

    def stop(self) -> None:
        raise NotImplementedError
