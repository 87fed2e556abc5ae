"""``backstep show TRACE.jsonl``: step through a recorded trace, forward and back.

The same UI as ``backstep run`` over a file: no torch import, no script run. A damaged trace
opens with what is valid (one line says what is not); a file that is not a trace exits with 2.
"""

from __future__ import annotations

import argparse
import contextlib

from backstep import protocol
from backstep.commands import serving
from backstep.commands.diff import add_tolerance_arguments, tolerance_problem
from backstep.events.breakpoints import parse_breakpoint


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "show",
        help="step through a recorded trace (forward and back) in the UI",
        description="Open a trace written by `backstep trace` in the stepping UI. Keys: n/p a "
        "node forward/back, c/C to the next/previous stop condition, [ / ] previous/next "
        "pass, g go to a pass or pass:step, d/D diagnoses, q quit.",
    )
    parser.add_argument("trace", metavar="TRACE.jsonl", help="a trace from `backstep trace`")
    parser.add_argument(
        "--break", dest="breakpoints", action="append", default=[], metavar="SPEC",
        help="a stop condition for c/C: MulBackward*, node:GLOB, module:GLOB, leaf:NAME, "
        "nonfinite, norm:VALUE (repeatable)",
    )
    parser.add_argument("--against", metavar="B.jsonl",
                        help="another trace of the same program: open where A first differs from "
                        "B (as `backstep diff` finds it) and show B's gradients beside A's")
    add_tolerance_arguments(parser)  # as `backstep diff` compares, for --against
    parser.add_argument("--no-stop-at-start", action="store_true",
                        help="c does not stop at the first node of every pass")
    serving.add_argument(parser)
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from backstep.commands import no_terminal, open_traces, say
    from backstep.traces.index import TraceIndex
    from backstep.traces.passes import TraceError

    try:
        breakpoints = [parse_breakpoint(spec) for spec in args.breakpoints]
    except protocol.ProtocolError as exc:
        say("show", str(exc))
        return 2
    problem = tolerance_problem(args) if args.against else None
    if problem is not None:
        say("show", problem)
        return 2
    opened = open_traces("show", args.trace, partial=True)
    if opened is None:
        return 2
    index = opened[0]
    against_index = None
    if args.against:
        try:
            index.scan()
            against_index = TraceIndex(args.against)
        except TraceError as exc:
            index.close()
            say("show", str(exc))
            return 2
    with index, against_index or contextlib.nullcontext():
        note = index.note() if index.done else None
        if note:
            say("show", f"note: {note}")
        if not index.numbers():
            say("show", f"{args.trace} has no backward pass to show")
            return 2
        try:  # the first pass is drawn at once: one too big to read is said here
            index.check_size(index.numbers()[0])
        except TraceError as exc:
            say("show", str(exc))
            return 2
        if serving.wanted(args):  # checked here; each browser connection opens it anew
            return serving.show(args)
        if no_terminal("show", "--serve opens it in a browser, `backstep diff` and `backstep "
                       "export` read a trace without one"):
            return 2
        from backstep.traces.diff import Tolerance
        from backstep.tui.app import BackstepApp
        from backstep.tui.runtime.hangup import HangUp
        from backstep.tui.runtime.replay_driver import ReplayDriver
        from backstep.tui.state.against import Against

        against = (Against(index, against_index, Tolerance(args.rtol, args.atol))
                   if against_index is not None else None)
        driver = ReplayDriver(index, note=note, against=against, settle_memory=True)
        app = BackstepApp(driver, breakpoints=breakpoints,
                          stop_at_pass_start=not args.no_stop_at_start)
        with HangUp(app) as hang_up:  # ended by a signal: the terminal restored first
            code = app.run()
    # a UI that crashed printed its traceback and says so in its status (Textual: 1), not 0
    return hang_up.code or app.return_code or int(code or 0)
