"""Diagnostics: say what went wrong, where and why, in autograd terms.

``Diagnostician(inner)`` is a Sink that wraps another: every event goes on to ``inner``
unchanged, and after it any ``diagnosis`` events it gave rise to::

    {"event": "diagnosis", "pass", "kind", "message", "node" (id | null),
     "source" ({file, line, code} | null),
     "title" (a banner headline), "severity" ("error" | "warning" | "info"),
     "related" ([{role, file, line, code}]: other lines the message names)}

Kinds: graph_freed, inplace_modified, nonfinite, grad_accumulating, retain_graph_unused,
grad_none, graph_kept_alive (``kept_alive``, read off ``memory_end``). Each cause is reported once. Diagnoses are read off events (see ``rules``), and
judged on what happened, not on what might: ``grad_none`` also looks at the caller's modules
once per backward call site (reported at the pass's end, for the parameters that still got no
gradient, nested passes included) and at PyTorch's non-leaf ``.grad`` warning
(``install()``/``uninstall()`` wrap ``warnings.showwarning`` for the session);
``grad_accumulating`` watches ``optimizer.step()`` (see ``accumulating``).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from backstep.engine.diagnostics.accumulating import ManualUpdates, OptimizerSteps
from backstep.engine.diagnostics.grad_none import WarningHook
from backstep.engine.diagnostics.kept_alive import KeptAlive
from backstep.engine.diagnostics.rules import EventRules, Found
from backstep.engine.diagnostics.untouched import ParameterCheck
from backstep.engine.recorder import Sink, emit_all

MAX_CAUSES = 10_000  # distinct causes remembered for "once"; more are dropped, not repeated

__all__ = ["Diagnostician"]

_ANALYSED = frozenset({"pass_begin", "node", "accumulate", "pass_end", "graph_released",
                       "memory_end"})
_NOTHING: list[dict[str, Any]] = []  # never appended to: the empty answer, shared


class _Thread:
    """What one thread is doing in the Diagnostician: analysing (``busy``, and the events
    emitted meanwhile, ``pending``), and collecting a batch (``collected``). One thread-local
    read a call, then plain attributes."""

    __slots__ = ("busy", "pending", "collected")

    def __init__(self) -> None:
        self.busy = False
        self.pending: list[dict[str, Any]] = []
        self.collected: list[dict[str, Any]] | None = None


class Diagnostician:
    """A Sink wrapper that forwards events and adds ``diagnosis`` events after them."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self._rules = EventRules()
        self._params = ParameterCheck()
        self._warnings = WarningHook(self._report, lambda: self._rules.last_pass)
        self._seen: set[tuple[Any, ...]] = set()
        self._lock = threading.RLock()
        self._steps = OptimizerSteps(self._report, self._lock)
        self._manual = ManualUpdates()
        self._kept = KeptAlive()  # graph_kept_alive (kept_alive.py)
        self._local = threading.local()

    # -- Sink ----------------------------------------------------------------------------------
    def _thread(self) -> _Thread:
        """This thread's state (made on its first event)."""
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = _Thread()
        return state

    def emit(self, event: dict[str, Any]) -> None:
        if event.get("event") == "exit":
            self.finish()
        state = getattr(self._local, "state", None) or self._thread()
        collected = state.collected
        if collected is not None:
            collected.append(event)  # re-entered inside emit_many: written in its place there
        else:
            self.inner.emit(event)
        if state.busy:
            # Re-entered on this thread (a graph_released finalizer ran while we worked):
            # analyse it after the event at hand, never while its state is half updated.
            state.pending.append(event)
            return
        self._follow(event, self.inner.emit, None, state)

    def emit_many(self, events: list[dict[str, Any]]) -> None:
        """``emit`` each event in turn, handing them and their diagnoses on in one batch."""
        state = getattr(self._local, "state", None) or self._thread()
        if state.busy or state.collected is not None:
            for event in events:
                self.emit(event)
            return
        out: list[dict[str, Any]] = []
        state.collected = out
        state.busy, state.pending = True, []
        quiet = self._rules.quiet_nodes
        lock = self._lock
        pending = state.pending
        steps, manual = self._steps, self._manual.accumulate
        done = 0  # events[:done] are in ``out``

        def accumulate(index: int) -> bool | None:
            """The ``accumulate`` event ``quiet`` met at ``index`` (under the lock), analysed as
            below, after the events before it and itself are in ``out`` (what its analysis
            emits comes after them); False when that set something off, to follow at once."""
            nonlocal done
            if pending:
                return None  # what is pending goes first, in order
            out.extend(events[done : index + 1])
            done = index + 1
            if not steps.stepped:  # ``_accumulate``, inline
                try:
                    manual(events[index])
                except Exception:  # noqa: BLE001 - a diagnosis must never break the script
                    pass
            return not pending

        try:
            start, count = 0, len(events)
            while start < count:
                try:
                    with lock:
                        # node events that find nothing, and leaves' accumulations, at once
                        end = quiet(events, start, accumulate)
                except Exception:  # noqa: BLE001 - analysed one by one instead
                    end = done  # from the first one ``quiet`` did not hand on
                if end > start:
                    out += events[done:end]
                    done = start = end
                    if pending:  # set off by the last one, an accumulation analysed already
                        self._follow(events[end - 1], out.append, _NOTHING, state)
                    continue
                event = events[start]
                done = start = start + 1
                out.append(event)
                if event.get("event") == "accumulate" and not pending:
                    try:  # never a diagnosis of its own: analysed here, at once
                        with lock:
                            self._accumulate(event)
                    except Exception:  # noqa: BLE001 - a diagnosis must never break the script
                        pass
                    if not pending:
                        continue
                    found: list[dict[str, Any]] | None = _NOTHING  # analysed: what it set off
                else:
                    found = None
                self._follow(event, out.append, found, state)  # its diagnoses, what it set off
        finally:
            state.busy = False
            state.collected = None
            emit_all(self.inner, out)

    def _follow(self, event: dict[str, Any], put: Any, found: list[dict[str, Any]] | None,
                state: _Thread) -> None:
        """Analyse ``event`` (unless ``found`` holds its diagnoses already), then whatever was
        emitted while it was analysed, and ``put`` each diagnosis found."""
        outer = state.busy  # inside emit_many: its pending list goes on
        if not outer:
            state.busy, state.pending = True, []
        try:
            queue = None  # the common case: one event, no diagnosis, nothing re-entered
            while True:
                if found is None:
                    try:
                        found = self._analyse(event)
                    except Exception:  # noqa: BLE001 - a diagnosis must never break the script
                        found = _NOTHING
                for diag in found:
                    put(diag)
                found = None
                if state.pending:
                    queue = (queue or []) + state.pending
                    state.pending.clear()
                if not queue:
                    break
                event = queue.pop(0)
        finally:
            state.busy = outer

    def flush(self) -> None:
        self.inner.flush()

    # -- session -------------------------------------------------------------------------------
    def install(self) -> None:
        """Start watching for PyTorch's non-leaf ``.grad`` warning (and, from the first pass
        on, optimizer steps)."""
        self._warnings.install()
        self._steps.enabled = True

    def uninstall(self) -> None:
        self._warnings.uninstall()
        with self._lock:
            self._steps.enabled = False
            self._steps.disarm()

    def __enter__(self) -> Diagnostician:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- analysis ------------------------------------------------------------------------------
    def _analyse(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("event")
        if kind == "node":  # most events: straight to their rule
            with self._lock:
                found = self._rules.node(event)
            return self._once(found) if found else _NOTHING
        if kind not in _ANALYSED:
            return _NOTHING
        with self._lock:
            if kind == "accumulate":
                self._accumulate(event)
                return _NOTHING
            if kind == "memory_end":
                found = self._kept.end(event)
                return self._once(found) if found else _NOTHING
            if kind == "pass_end":
                self._steps.end(event)
                caller = self._rules.callers.get(event.get("pass", 0))
                manual, params = self._manual.end(event, caller), self._params.end(event)
                found = self._rules.feed(event)
                if manual or params:
                    found = [*found, *manual, *params]
            else:
                if kind == "pass_begin":
                    self._kept.begin(event)
                    self._steps.arm()
                    self._steps.begin(event)
                    self._params.begin(event, sys._getframe(1))
                found = self._rules.feed(event)
            return self._once(found) if found else _NOTHING

    def _accumulate(self, event: dict[str, Any]) -> None:
        """An ``accumulate`` event (under the lock): it never gives a diagnosis at once."""
        if not self._steps.stepped:  # hand-made updates: no optimizer to watch
            self._manual.accumulate(event)

    def _once(self, found: list[Found]) -> list[dict[str, Any]]:
        out = []
        for key, diag in found:
            if key in self._seen or len(self._seen) >= MAX_CAUSES:
                continue
            self._seen.add(key)
            out.append(diag)
        return out

    def finish(self) -> None:
        """The script is ending: say what waited for more passes (before its ``exit`` event;
        a sink that sends ``exit`` itself calls this first)."""
        try:
            with self._lock:
                out = self._once([*self._rules.finish(), *self._params.exit()])
        except Exception:  # noqa: BLE001 - a diagnosis must never break the script
            return
        for diag in out:
            self.inner.emit(diag)

    def _report(self, found: Found) -> None:
        """A diagnosis found outside the event stream (a warning)."""
        with self._lock:
            out = self._once([found])
        for diag in out:
            self.inner.emit(diag)
