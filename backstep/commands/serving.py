"""``--serve``: ``backstep show`` and ``backstep run`` serve their UI to a browser tab.

``show TRACE --serve`` runs a server whose every browser connection gets its own
``backstep show TRACE`` (same options). ``run --serve SCRIPT`` runs the script in this process
behind a loopback remote server, as ``--listen`` does, and the browser's page runs
``backstep connect`` to it: reloading the page attaches again, and the script's output stays
on this terminal (a copy shows in the page's console). Either way the page is served on
127.0.0.1 (``--serve-on HOST:PORT`` asks for another address) under an unguessable URL
printed on stderr. Nothing here imports torch or textual.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--serve", action="store_true",
                        help="serve the UI to a browser instead of this terminal, on 127.0.0.1 "
                        "under a secret URL printed on stderr (needs backstep[serve])")
    parser.add_argument("--serve-on", metavar="[HOST:]PORT", default=None,
                        help="with --serve (implied): serve on this address instead (a HOST "
                        "other than 127.0.0.1 lets other machines in: the URL is the only key)")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.serve or args.serve_on is not None)


def _served(command: list[str], serve: str | None, who: str, **options: Any) -> Any:
    """A started ``ServedUI`` on ``serve``'s address, announced; None after one line if not."""
    from backstep.process import notebook_cell
    from backstep.process.served import ServedUI, serve_address

    try:
        served = ServedUI(command, serve_address(serve), **options)
        served.start()
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"backstep {who}: --serve: {exc}", file=sys.stderr)
        return None
    notebook_cell.show(served, f"backstep {who}", False)
    return served


class _NotServed(Exception):
    """The browser server did not start (already said on stderr)."""


def show(args: argparse.Namespace) -> int:
    """``backstep show TRACE --serve``: serve until ctrl-c."""
    from backstep.process.served import ui_command

    command = ["show", os.path.abspath(args.trace)]
    for spec in args.breakpoints:
        command += ["--break", spec]
    if args.against:
        command += ["--against", os.path.abspath(args.against)]
    for name in ("rtol", "atol"):
        if getattr(args, name) is not None:
            command += [f"--{name}", repr(getattr(args, name))]
    if args.no_stop_at_start:
        command.append("--no-stop-at-start")
    served = _served(ui_command(command), args.serve_on, "show")
    if served is None:
        return 2
    try:
        served.wait()
    except KeyboardInterrupt:
        pass
    finally:
        served.stop()
    return 0


def run(args: argparse.Namespace, breakpoints: list[dict[str, Any]]) -> int:
    """``backstep run --serve SCRIPT``: the script's exit code."""
    from backstep.process.attach.served import connect_command
    from backstep.process.listen import run_listening
    from backstep.process.remote import ENV_TOKEN, RemoteServer

    if args.module is not None:
        print("backstep run: --serve takes a script path, not -m MODULE", file=sys.stderr)
        return 2
    stop_at_pass_start = not args.no_stop_at_start
    held: list[Any] = []

    def announce(server: RemoteServer) -> None:
        served = _served(connect_command(server.address, breakpoints, stop_at_pass_start),
                         args.serve_on, "run", env={ENV_TOKEN: server.token})
        if served is None:
            raise _NotServed
        held.append(served)

    try:
        return run_listening(args.script, list(args.args), "127.0.0.1:0",
                             wait=not args.no_wait, breakpoints=breakpoints,
                             stop_at_pass_start=stop_at_pass_start, source=not args.no_source,
                             announce=announce)
    except _NotServed:
        return 2
    finally:
        for served in held:  # the page stays until the person has read the end and quits
            served.finish()
