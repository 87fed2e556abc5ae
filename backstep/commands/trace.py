"""``backstep trace [-o FILE] script.py [args...]``: run a script, record every backward pass."""

from __future__ import annotations

import argparse
import sys

from backstep.commands import add_script_arguments, torch_problem


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "trace",
        help="run a script and record every backward pass to JSON lines",
        description="Run SCRIPT exactly as python would and record every backward pass, node "
        "by node, as JSON lines. Options go before the script; the rest belongs to it.",
    )
    parser.add_argument("-o", "--output", default="backstep-trace.jsonl", metavar="FILE",
                        help="where to write the events (default: %(default)s)")
    add_script_arguments(parser, main)


def main(args: argparse.Namespace) -> int:
    problem = torch_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    try:
        stream = open(args.output, "wb")  # noqa: SIM115 - lives as long as the script
    except OSError as exc:
        print(f"backstep trace: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    from backstep.engine.recorder import JsonlRecorder
    from backstep.engine.runner import run_script
    from backstep.engine.session import Session, refuse_missing, session_event

    recorder = JsonlRecorder(stream)
    recorder.emit(session_event([args.script, *args.args]))
    recorder.flush()
    missing = refuse_missing(args.script, "backstep trace", recorder)
    if missing is not None:
        stream.close()
        return missing

    def on_exit(code: int, traceback: str | None) -> None:
        recorder.emit({"event": "exit", "code": code, "traceback": traceback})
        recorder.flush()

    with Session(recorder, source=not args.no_source):
        code = run_script(args.script, args.args, on_exit=on_exit)
    stream.close()
    return code
