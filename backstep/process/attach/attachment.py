"""``backstep.attach()``: arm the debugger from inside a running script.

The user's process is the debuggee. ``attach`` returns at once; the next backward pass stops
inside a backward hook. The UI runs as a child process on the same terminal (Textual needs its own
main thread), and while it is up the script's fds 1 and 2 — C-level writes included — go through
pipes to its console panel. When the person quits, or the UI dies, or its terminal closes, the
hooks are removed, the fds restored (with anything the UI had not shown yet), and the script runs
on undisturbed. With no terminal, ``attach`` says so in one line and lets the script run; with
``trace=`` (or BACKSTEP_TRACE) it records a trace instead of opening the UI.

Which attachment arms: ``trace.py`` records a trace, ``remote.py`` waits for ``backstep connect``,
``served.py`` serves the UI to a browser (a notebook), ``terminal.py`` opens it on this terminal;
each is a ``base.Attachment``, and ``registry.py`` holds the one this process has. Nothing here
imports torch until a UI or a trace is actually armed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from backstep.engine.torch_api import check_imported
from backstep.events.breakpoints import parse_breakpoint, validate_breakpoints
from backstep.process.attach import registry
from backstep.process.attach.terminal import UIAttachment


def attach(
    *,
    breakpoints: Sequence[dict[str, Any] | str] = (),
    stop_at_pass_start: bool = True,
    source: bool = True,
    trace: str | None = None,
    listen: str | None = None,
    wait: bool = True,
    serve: str | None = None,
    eager: bool = False,
    every: int | None = None,
    when: Sequence[str] = (),
    after: int = 1,
    trips: int = 3,
    tensors: bool = False,
) -> None:
    """Arm backstep in this process; harmless when it is already armed (in a notebook, from
    another cell than the one whose frame shows the UI, the UI moves to this cell's output).

    ``breakpoints`` take the dict form of ``protocol`` or the command-line form
    (``"MulBackward*"``, ``"module:model.encoder.*"``, ``"nonfinite"``, ``"norm:1e3"``).
    ``listen="[HOST:]PORT"`` (or BACKSTEP_LISTEN) opens no UI here: a remote one attaches with
    ``backstep connect``; ``wait`` makes this call wait for the first one. In a Jupyter kernel
    the UI is served to the browser and shown in the cell; ``serve="[HOST:]PORT"`` (or
    BACKSTEP_SERVE) serves it from anywhere, on that address (default: 127.0.0.1, any port).
    ``eager`` turns torch.compile off from here on (code compiled before is dropped), as
    ``--eager`` does. With ``trace``, ``every``, ``when``, ``after``, ``trips`` and ``tensors`` are
    ``backstep trace``'s options (docs/trace.md): which passes are written in full, the others
    in brief (ValueError for a bad one); a ``trace`` name ending in ``.gz`` is written gzip.
    """
    from backstep.process.forks import in_multiprocessing_child

    if in_multiprocessing_child():  # a spawned worker importing the script's top level
        return
    with registry.lock:
        if registry.current is not None and registry.current.active:
            if not registry.current.elsewhere():
                return
            registry.current.stop()  # its frame is in another cell: the UI moves to this one
        parsed = [parse_breakpoint(b) if isinstance(b, str) else b for b in breakpoints]
        validate_breakpoints(parsed)
        trace = trace or os.environ.get("BACKSTEP_TRACE") or None
        listen = listen or os.environ.get("BACKSTEP_LISTEN") or None
        plan = None
        if trace:
            from backstep.engine.plan import TracePlan

            plan = TracePlan(every, list(when), after, trips, tensors)  # PlanError: a ValueError
        if trace:
            from backstep.process.attach.trace import TraceAttachment

            registry.current = TraceAttachment(trace, source, plan)
        elif listen:
            from backstep.process.attach.remote import RemoteAttachment

            try:
                registry.current = RemoteAttachment(listen, parsed, stop_at_pass_start, source, wait)
            except ValueError as exc:
                print(f"backstep: listen={listen!r}: {exc} (the script continues without "
                      "backstep)", file=sys.stderr)
                return
        elif serve or os.environ.get("BACKSTEP_SERVE") or _in_notebook():
            from backstep.process.attach.served import ServedAttachment

            try:
                registry.current = ServedAttachment(parsed, stop_at_pass_start, source, serve)
            except ValueError as exc:
                print(f"backstep: {exc} (the script continues without backstep)",
                      file=sys.stderr)
                return
        elif not (os.isatty(0) and os.isatty(1)):
            print("backstep: no terminal to open the debugger on; the script continues without it "
                  "(set BACKSTEP_TRACE=run.jsonl to record a trace instead)", file=sys.stderr)
            return
        else:
            registry.current = UIAttachment(parsed, stop_at_pass_start, source)
        problem = check_imported()  # before anything is armed: the script runs untouched
        if problem is not None:
            registry.current = None
            if not registry.torch_warned:
                registry.torch_warned = True
                print(f"{problem} (the script continues without backstep)", file=sys.stderr)
            return
        if eager:
            from backstep.engine.compiled import eager as eager_mode

            eager_mode.apply()
        try:
            registry.current.start()
        except Exception as exc:  # noqa: BLE001 - attaching must never break the script
            print(f"backstep: could not attach: {exc}", file=sys.stderr)
            registry.current.stop()
            registry.current = None


def _in_notebook() -> bool:
    from backstep.process.notebook_cell import in_notebook

    return in_notebook()


def detach() -> None:
    """Disarm: hooks removed, fds restored, the UI closed (a page served to a browser stays
    open on the session's last state until it is quit or closed)."""
    with registry.lock:
        if registry.current is not None:
            registry.current.release()


@contextlib.contextmanager
def attached(**options: Any) -> Iterator[None]:
    """Arm backstep for the ``with`` block only."""
    attach(**options)
    try:
        yield
    finally:
        detach()
