"""The stepping controller: where to stop, and waiting for a command while stopped.

A stop blocks the thread that runs the node (the caller's thread on CPU, a device thread on CUDA)
inside a backward hook until a command arrives. Commands come from another thread (the UI
connection's reader) through ``feed``. Several threads can be paused at once (passes on several
threads, one pass's nodes on the caller's and the device threads): they wait in line, and only
the first is shown and takes commands. If the command source goes away (``close``), every pause
ends and no later pass stops: a debugger that lost its UI must never hang the script.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backstep import protocol
from backstep.events.breakpoints import Breakpoints
from backstep.events.commands import validate_command

_CLOSED = {"cmd": "__closed__"}


class BackstepAbort(RuntimeError):
    """Raised out of ``backward()`` when the person aborts the pass from the debugger."""


@dataclass
class Stop:
    """One paused thread: the node it waits before (or after) and its own command queue."""

    number: int  # unique for the session: commands name it, so a late one can't resume another
    pass_: int
    event: dict[str, Any]
    on: Any
    commands: queue.SimpleQueue[dict[str, Any]] = field(default_factory=queue.SimpleQueue)

    def brief(self) -> dict[str, Any]:
        """What the ``waiting`` event says about a stop in line."""
        ev = self.event
        return {"stop": self.number, "pass": self.pass_, "step": ev.get("step"),
                "id": ev.get("id"), "name": ev.get("name"), "thread": ev.get("thread"),
                "device": ev.get("device")}


class Controller:
    """Decides stops and serves commands while backward hooks are paused.

    Several passes can stop at once (threads, CUDA device threads). Each paused thread waits on
    its own queue; the stops form a line, and only its head, the shown stop, takes commands.
    When the shown stop resumes, the one that has waited longest is shown (a ``stopped`` event),
    and every change to the line is announced with a ``waiting`` event. A stop holds only its
    own thread: other passes run on until their next stop and wait there in line.
    """

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        breakpoints: list[dict[str, Any]] | None = None,
        stop_at_pass_start: bool = True,
    ) -> None:
        self.emit = emit
        self.breakpoints = Breakpoints.from_list(breakpoints or [])
        self.stop_at_pass_start = stop_at_pass_start
        self.interrupt = False
        self.detached = False
        # the UI quit (q) while no pass was stopped: the running pass ends at its next hook
        self.aborting = False
        # a KeyboardInterrupt reached a paused thread: the attachment detaches (``served``)
        self.interrupted = False
        # guards the line; events about it are emitted under it, and an emit may feed a command
        # back on the same thread (tests answer stops that way), hence reentrant
        self._lock = threading.RLock()
        self._line: list[Stop] = []  # paused threads, shown stop first
        self._numbers = itertools.count(1)
        self._behind: list[int] = []  # stop numbers the last ``waiting`` event listed
        self.tensor_lookup: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self._evaluating: set[Any] = set()  # consoles running a line (``cancel`` reaches them)

    @property
    def paused(self) -> Any:
        """The pass of the shown stop, if any."""
        line = self._line
        return line[0].on if line else None

    def waiting(self) -> list[Stop]:
        """The stops in line behind the shown one."""
        with self._lock:
            return self._line[1:]

    # -- what a pass needs --------------------------------------------------------------
    def live(self) -> bool:
        """Could anything stop the next pass?"""
        if self.detached:
            return False
        bp = self.breakpoints
        return self.stop_at_pass_start or self.interrupt or bp.static or bp.on_gradients

    # -- commands from the other thread -------------------------------------------------
    def feed(self, message: dict[str, Any]) -> None:
        """Take one command from the UI connection; never raises: whatever goes wrong with a
        command is an ``error`` reply, so the reader that calls this never dies."""
        try:
            self._handle(message)
        except Exception as exc:  # noqa: BLE001 - one bad command must not end the session
            try:
                self.emit(protocol.error_event(protocol.describe(exc), _req(message)))
            except Exception:  # noqa: BLE001, S110 - the UI is gone; nothing left to tell
                pass

    def _handle(self, message: dict[str, Any]) -> None:
        validate_command(message)
        cmd = message["cmd"]
        if cmd == "break":
            self.breakpoints = Breakpoints.from_list(message.get("breakpoints", []))
        elif cmd == "options":
            self.stop_at_pass_start = bool(message.get("stop_at_pass_start", True))
        elif cmd == "interrupt":
            self.interrupt = True
        elif cmd == "detach":
            self.close()
        elif cmd == "start":
            self.emit(protocol.error_event("already started"))
        elif cmd == "abort" and "stop" not in message and not self._line:
            self.aborting = True  # q during a running pass: no draining it, no long grace
        elif cmd == "cancel":
            self._cancel()
        else:
            self._to_stop(message)

    def _to_stop(self, message: dict[str, Any]) -> None:
        """Hand a command to the shown stop; a resuming one takes it out of the line."""
        cmd = message["cmd"]
        with self._lock:
            stop = self._line[0] if self._line else None
            wanted = message.get("stop")
            if stop is None or (wanted is not None and wanted != stop.number):
                if wanted is None:
                    why = f"'{cmd}' needs a stopped pass"
                elif any(s.number == wanted for s in self._line):
                    why = f"stop {wanted} is waiting in line: only the shown stop takes commands"
                else:
                    why = f"stop {wanted} is no longer paused"
                self.emit(protocol.error_event(why, _req(message)))
                return
            if cmd not in ("tensor", "eval"):
                self._line.pop(0)
                if self._line:
                    self.emit(self._line[0].event)
                self._announce_line()
            stop.commands.put(message)

    def _announce_line(self) -> None:
        """A ``waiting`` event when the stops behind the shown one changed (never with a single
        pass, which has no one in line)."""
        behind = [s.number for s in self._line[1:]]
        if behind != self._behind:
            self._behind = behind
            self.emit({"event": "waiting", "stops": [s.brief() for s in self._line[1:]]})

    def close(self) -> None:
        """The UI is gone (or detached): release every pause and never stop again."""
        with self._lock:
            self.detached = True
            line, self._line = self._line, []
        for stop in line:
            stop.commands.put(_CLOSED)
        self._cancel()  # a console line still running would hold its pause past the UI

    def reopen(self, breakpoints: list[dict[str, Any]], stop_at_pass_start: bool) -> None:
        """A new UI took over after ``close`` (a remote ``connect``): stop again, with its
        breakpoints and options. Raises ProtocolError for bad breakpoints, changing nothing."""
        compiled = Breakpoints.from_list(breakpoints)
        with self._lock:
            self.breakpoints = compiled
            self.stop_at_pass_start = stop_at_pass_start
            self.interrupt = False
            self._behind = []
            self.detached = False

    def check_abort(self) -> None:
        """Called by every hook first: raise BackstepAbort once the UI quit a running pass."""
        if self.aborting:
            raise BackstepAbort("backward pass aborted from the backstep debugger")

    # -- a pause, on the thread running the node ------------------------------------------
    def pause(self, stopped: dict[str, Any], on: Any, console: Any = None) -> str:
        """Emit ``stopped`` (or queue it behind the shown stop) and block this thread until a
        command resumes it; returns that command. ``eval`` commands run in ``console``
        (``console_eval.StopConsole``) on this thread meanwhile, over the paused node's tensors.

        Returns "step", "continue", "finish" or "detach"; raises BackstepAbort for "abort".
        Only this thread waits: other passes keep running, and stop in line behind this one.
        """
        with self._lock:
            if self.detached:
                return "detach"
            self.interrupt = False
            stop = Stop(next(self._numbers), stopped.get("pass", 0), stopped, on)
            stopped["stop"] = stop.number
            self._line.append(stop)
            if len(self._line) == 1:
                self.emit(stopped)
            self._announce_line()
        try:
            while True:
                message = stop.commands.get()
                cmd = message["cmd"]
                if cmd == "__closed__":
                    return "detach"
                if cmd == "tensor":
                    self.emit(self._tensor(message))
                    continue
                if cmd == "eval":
                    self.emit(self._evaluate(console, message))
                    continue
                if cmd == "abort":
                    raise BackstepAbort("backward pass aborted from the backstep debugger")
                return cmd
        except KeyboardInterrupt:  # a notebook's interrupt (or ctrl-c) at the stop: it ends
            self.interrupted = True  # the session with it, the way the script's author asked
            self.close()
            raise

    def _evaluate(self, console: Any, message: dict[str, Any]) -> dict[str, Any]:
        """Run one console line on this (the paused) thread; ``cancel`` interrupts it."""
        req = message["req"]
        if console is None:
            return protocol.error_event("this stop has no console", req)
        with self._lock:
            self._evaluating.add(console)
        try:
            ok, text = console.evaluate(message["source"])
        finally:
            with self._lock:
                self._evaluating.discard(console)
        return {"event": "evaluated", "req": req, "ok": ok, "text": text}

    def _cancel(self) -> None:
        """ctrl+c in the console's input line: interrupt what is being evaluated."""
        with self._lock:
            consoles = list(self._evaluating)
        for console in consoles:
            console.interrupt()

    def _tensor(self, message: dict[str, Any]) -> dict[str, Any]:
        req = message["req"]
        if self.tensor_lookup is None:
            return protocol.error_event("tensor values are not available", req)
        try:
            return {"event": "tensor", "req": req, **self.tensor_lookup(message)}
        except LookupError as exc:
            return protocol.error_event(str(exc.args[0] if exc.args else exc), req)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the pause
            return protocol.error_event(f"{type(exc).__name__}: {exc}", req)


def _req(message: Any) -> int | None:
    req = message.get("req") if isinstance(message, dict) else None
    return req if isinstance(req, int) and not isinstance(req, bool) and \
        abs(req) <= protocol.MAX_INT else None
