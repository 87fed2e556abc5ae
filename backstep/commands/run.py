"""``backstep run [options] script.py [args...]``: step through backward passes in a live UI.

This process is the UI (Textual owns the main thread and the terminal); the script runs in a
child debuggee process. Nothing here imports torch, and textual only once the UI starts.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from backstep import protocol
from backstep.commands import add_script_arguments, other_ranks, serving, torch_problem
from backstep.events.breakpoints import parse_breakpoint


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "run",
        help="run a script and step through its backward passes",
        description="Run a Python script under the debugger: every backward pass stops at its "
        "first node and the UI shows the graph, gradients, saved tensors, source and leaves. "
        "Options go before the script; everything after it is the script's own argv.",
    )
    parser.add_argument(
        "--break", dest="breakpoints", action="append", default=[], metavar="SPEC",
        help="stop at a condition: MulBackward*, node:GLOB, module:GLOB, leaf:NAME, nonfinite, "
        "norm:VALUE (repeatable)",
    )
    parser.add_argument("--no-stop-at-start", action="store_true",
                        help="do not stop at the first node of every pass (only at breakpoints)")
    parser.add_argument("--listen", metavar="[HOST:]PORT", default=None,
                        help="open no UI here: wait for `backstep connect` on this TCP port "
                        "(host 127.0.0.1 unless given; also $BACKSTEP_LISTEN)")
    parser.add_argument("--no-wait", action="store_true",
                        help="with --listen: start the script at once, not when a UI attaches")
    serving.add_argument(parser)
    other_ranks.add_arguments(parser)
    add_script_arguments(parser, main)
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        breakpoints = [parse_breakpoint(spec) for spec in args.breakpoints]
    except protocol.ProtocolError as exc:
        print(f"backstep run: {exc}", file=sys.stderr)
        return 2
    code = other_ranks.run_unless_ours(args)  # under torchrun, only one rank opens the UI
    if code is not None:
        return code
    listen = args.listen or os.environ.get("BACKSTEP_LISTEN")
    if serving.wanted(args):
        if args.listen:
            print("backstep run: --serve and --listen exclude each other", file=sys.stderr)
            return 2
        return serving.run(args, breakpoints)
    if listen:
        if args.module is not None:
            print("backstep run: --listen takes a script path, not -m MODULE", file=sys.stderr)
            return 2
        from backstep.process.listen import run_listening

        return run_listening(args.script, list(args.args), listen, wait=not args.no_wait,
                             breakpoints=breakpoints,
                             stop_at_pass_start=not args.no_stop_at_start,
                             source=not args.no_source)
    code = launch(args.module or args.script, list(args.args), breakpoints=breakpoints,
                  stop_at_pass_start=not args.no_stop_at_start, source=not args.no_source,
                  as_module=args.module is not None)
    # the UI process runs no one's code but backstep's: the command line's ``backstep run`` ends
    # without the interpreter's teardown (cli.main), one called in a process of its own returns
    args.quick_exit = True
    return code


def module_missing(name: str) -> str | None:
    """Python's message when ``python -m name`` cannot even find the top-level package, found
    without importing anything here (what is missing deeper shows in the script's console)."""
    import importlib.machinery

    top = name.partition(".")[0]
    if (not top or top in sys.builtin_module_names
            or importlib.machinery.FrozenImporter.find_spec(top) is not None
            or importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path[1:]])):
        return None
    return f"{sys.executable}: No module named {top}"


def launch(
    script: str,
    script_args: list[str],
    *,
    breakpoints: Sequence[dict[str, Any]] = (),
    stop_at_pass_start: bool = True,
    source: bool = True,
    narration: str | None = None,
    as_module: bool = False,
) -> int:
    """Open the full-screen UI, run the script (``as_module``: the module, as ``python -m``)
    in a debuggee, return the script's exit code."""
    if as_module:
        missing = module_missing(script)
        if missing is not None:
            print(missing, file=sys.stderr)
            return 1
    elif not os.path.exists(script):
        print(f"backstep: can't open file {os.path.abspath(script)!r}: "
              f"[Errno 2] {os.strerror(2)}", file=sys.stderr)
        return 2
    story = None
    if narration is not None:
        from backstep.demo import narration as narration_module

        try:
            story = narration_module.load(narration)
        except ValueError as exc:
            print(f"backstep: {exc}", file=sys.stderr)
            return 2
    problem = torch_problem()  # here, on the plain terminal, not in the UI's console
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2

    from backstep.process.head_start import HeadStart
    from backstep.process.launcher import debuggee_command, exit_status

    # the script starts now, while Textual loads (half a second the script used to wait out)
    start = HeadStart(debuggee_command(script, script_args, source=source, as_module=as_module),
                      {"cmd": "start", "breakpoints": [dict(bp) for bp in breakpoints],
                       "stop_at_pass_start": stop_at_pass_start})
    start.start()
    try:
        from backstep.tui.app import BackstepApp
        from backstep.tui.runtime.hangup import HangUp
        from backstep.tui.runtime.live_driver import LiveDriver
        from backstep.tui.runtime.live_link import LiveLink

        link = LiveLink(start.debuggee.argv, head_start=start)
        app = BackstepApp(LiveDriver(link), breakpoints=list(breakpoints),
                          stop_at_pass_start=stop_at_pass_start, source=source, narration=story)
        with HangUp(app) as hang_up:  # the terminal closed or someone ended us: clean up first
            try:
                result = app.run()
            except SystemExit as exc:  # a signal while the app was starting (closed below)
                return int(exc.code) if isinstance(exc.code, int) else 1
            finally:
                link.close()  # idempotent: no orphan even if the UI crashed
    finally:
        start.close()  # and none if the UI never came up (the same close: a no-op after it)
    if hang_up.code is not None:
        return hang_up.code
    from backstep.tui.runtime.leave_output import leave_output

    leave_output(app.console_lines, sys.stdout)  # the UI's screen is gone: the output stays
    if result is None:
        if app.return_code == 1:  # the UI crashed (Textual printed why): not the script's status
            return 1
        return exit_status(link.returncode())
    return int(result)
