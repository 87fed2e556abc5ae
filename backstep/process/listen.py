"""``backstep run --listen`` (or ``BACKSTEP_LISTEN``): wait for a remote UI instead of opening
one (``attach_remote`` is the same for ``backstep.attach(listen=...)``).

The script runs in this very process, its stdin, stdout and stderr untouched: they stay the
job's own terminal or log (``remote_output`` copies what it prints to the attached UI). One line on stderr gives the address and a fresh token. By default
the script waits for the first UI before it runs (``run``), or ``attach()`` waits for it before
it returns, like ``debugpy --wait-for-client``: the first pass is never missed. With
``wait=False`` it runs on at once and stops only while a UI is attached. Nothing here imports
torch until the script does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from backstep.process.remote import ENV_LISTEN, RemoteServer, parse_address


def in_pass(capture: Any) -> bool:
    """Whether a backward pass is in flight under ``capture`` (the server's ``busy``)."""
    return bool(capture is not None and getattr(capture, "_live", None))


def run_listening(script: str, script_args: list[str], listen: str, *, wait: bool = True,
                  breakpoints: list[dict[str, Any]] | None = None,
                  stop_at_pass_start: bool = True, source: bool = True,
                  announce: Callable[[RemoteServer], None] | None = None) -> int:
    """``backstep run --listen``: run the script here, serving UIs over TCP; its exit code.
    ``announce`` replaces the line that says where to attach (``run --serve``)."""
    try:
        address = parse_address(listen)
    except ValueError as exc:
        print(f"backstep run: --listen: {exc}", file=sys.stderr)
        return 2
    from backstep.commands import torch_problem

    problem = torch_problem()  # as `backstep run` without --listen: before anything runs
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from backstep.engine.controller import Controller
    from backstep.engine.runner import run_script
    from backstep.engine.session import Session, refuse_missing, session_event

    os.environ.pop(ENV_LISTEN, None)  # for this job only: a child script starts no server
    try:
        server = RemoteServer(address, session_event([script, *script_args]))
    except OSError as exc:
        print(f"backstep run: cannot listen on {listen}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    controller = Controller(server.emit, breakpoints or [], stop_at_pass_start)
    controller.close()  # no UI yet: nothing stops
    session = Session(server, controller, record=False, source=source,
                      on_fork=lambda: server.forget())
    server.busy = lambda: in_pass(session.capture)
    server.serve(controller)
    try:
        missing = refuse_missing(script, "backstep run", server)
        if missing is not None:
            return missing
        if announce is not None:
            announce(server)
        else:
            print(server.announcement(wait), file=sys.stderr, flush=True)
            exposed = server.exposure()
            if exposed is not None:
                print(exposed, file=sys.stderr, flush=True)
        try:
            if wait and not server.wait_for_ui():
                return 1
        except KeyboardInterrupt:  # ctrl-c while waiting: as python would end, quietly
            return 130
        from backstep.process import remote_output

        # a copy of what the script prints, for the attached UI's console
        restore = remote_output.install(server.emit, server.attached)
        try:
            with session:
                code = run_script(script, script_args, on_exit=session.exit)
        finally:
            restore()
    finally:
        server.close()
    return code
