"""What every debuggee does around the user's script: announce the session, arm capture and
provenance, and make sure events reach their sink even when the script ends with ``os._exit``.

Nothing here imports torch. Capture is armed the moment the script's own ``import torch``
finishes (a post-import hook), so a script sees torch's import — its warnings included — at the
same moment and in the same way as under plain python, and a script without torch never loads it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
from collections.abc import Callable
from typing import Any

from backstep import protocol
from backstep.engine.compiled import eager
from backstep.engine.recorder import Sink
from backstep.process import ranks


def session_event(argv: list[str]) -> dict[str, Any]:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    return {
        "event": "session",
        "version": protocol.VERSION,
        "torch": torch_version,
        "argv": list(argv),
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        **ranks.session_fields(),
        **eager.session_fields(),
    }


def refuse_missing(path: str, who: str, sink: Sink) -> int | None:
    """If python could not even start ``path``, say so as python does and return its exit
    code (the sink gets the ``exit`` event); None when the script can run."""
    from backstep.engine.runner import ScriptMissing, check_script

    try:
        check_script(path)
    except ScriptMissing as exc:
        print(f"{who}: {exc}", file=sys.stderr)
        sink.emit({"event": "exit", "code": exc.code, "traceback": None})
        sink.flush()
        return exc.code
    return None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback`` once, right after the top-level ``torch`` package has executed."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self._busy = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader, watcher = spec.loader, self
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            loader.exec_module = original  # type: ignore[method-assign]
            watcher.remove()
            watcher.callback()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class Session:
    """Capture (and provenance, unless turned off) armed for the life of a script.

    In a forked child the session disarms itself at once (``forks``): hooks and patches undone
    without a word on the parent's sink, which ``on_fork`` abandons. ``on_fork`` may return a
    sink of the child's own (``trace --children``); the child then runs a session of its own.
    """

    def __init__(self, sink: Sink, controller: Any = None, *, record: bool = True,
                 source: bool = True,
                 on_fork: Callable[[], Sink | None] | None = None, plan: Any = None) -> None:
        from backstep.engine.diagnostics import Diagnostician
        from backstep.engine.process_group import GroupNotice

        self.diagnostician = Diagnostician(GroupNotice(sink))
        self.sink: Sink = self.diagnostician
        self.controller = controller
        self.record = record
        self.source = source
        self.on_fork = on_fork
        self.plan = plan  # ``trace --every/--when`` (engine/planned): which passes in full
        self.capture: Any = None
        self.provenance: Any = None
        self.forked = False  # this process is a fork of the one that armed the session
        self.child: Session | None = None  # the fork's own session (trace --children)
        self._watcher: _AfterImport | None = None
        self._real_exit: Callable[[int], Any] | None = None
        self._unfork: Callable[[], None] | None = None

    def arm(self) -> None:
        """Install capture and provenance (torch is imported by now). A torch that lacks what
        backstep needs is named in one line and left alone, never an error in ``import torch``."""
        if self.capture is not None or self.forked:
            return
        from backstep.engine.torch_api import check_imported

        problem = check_imported()
        if problem is not None:
            print(f"{problem} (the script runs without backstep)", file=sys.stderr)
            return
        if self.plan is not None:
            from backstep.engine.planned import PlannedCapture

            self.capture = PlannedCapture(self.sink, self.plan)
        elif self.controller is not None:  # a live UI: every pass in brief too (its H)
            from backstep.engine.briefed import BriefedCapture

            self.capture = BriefedCapture(self.sink, self.controller, record=self.record)
        else:
            from backstep.engine.capture import Capture

            self.capture = Capture(self.sink, self.controller, record=self.record)
        self.capture.install()
        if self.source:
            from backstep.engine.provenance import Provenance, annotate

            self.provenance = Provenance()
            self.provenance.install()
            self.capture.annotate = annotate

    def __enter__(self) -> Session:
        from backstep.process import forks

        self.diagnostician.install()
        if "torch" in sys.modules:
            self.arm()
        else:
            self._watcher = _AfterImport(self.arm)
            self._watcher.install()
        self._real_exit = os._exit
        real_exit, session = os._exit, self

        def _exit(code: int) -> Any:  # the trace must survive os._exit
            session.exit(code, None)
            real_exit(code)

        os._exit = _exit
        self._unfork = forks.on_fork_child(self._after_fork)
        return self

    def exit(self, code: int, traceback: str | None) -> None:
        """Announce the script's end, once, from the process that armed the session (a fork
        announces its own only to a sink of its own)."""
        if self.forked:
            if self.child is not None:
                self.child.exit(code, traceback)
            return
        # how many passes ran, watched or not: the UI says so once the script ended
        passes = self.capture.passes if self.capture is not None else None
        self.sink.emit({"event": "exit", "code": code, "traceback": traceback,
                        "passes": passes})
        self.sink.flush()

    def _after_fork(self) -> None:
        """In a forked child: disarm without a word, then maybe start the child's own session."""
        self.forked = True
        self._disarm(quiet=True)
        sink = self.on_fork() if self.on_fork is not None else None
        if sink is not None:
            sink.emit({**session_event(list(sys.argv)), "parent": os.getppid()})
            # the child follows the plan too (--every/--when/--after/--trips), from its own start
            plan = self.plan.fresh() if self.plan is not None else None
            self.child = Session(sink, record=True, source=self.source, on_fork=self.on_fork,
                                 plan=plan)
            self.child.__enter__()

    def _disarm(self, quiet: bool) -> None:
        if self._real_exit is not None:
            os._exit = self._real_exit
            self._real_exit = None
        if self._unfork is not None:
            self._unfork()
            self._unfork = None
        if self._watcher is not None:
            self._watcher.remove()
        if self.provenance is not None:
            self.provenance.uninstall()
        if self.capture is not None:
            if quiet:  # nothing may reach the parent's sink, no pause may wait on its UI
                self.capture.sink = self.capture.controller = None
                self.capture._released_queue = []
            self.capture.uninstall()
        self.diagnostician.uninstall()

    def __exit__(self, *exc: object) -> None:
        if self.forked:
            if self.child is not None:
                self.child.__exit__(*exc)
            return
        self._disarm(quiet=False)
        self.sink.flush()
