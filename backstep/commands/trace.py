"""``backstep trace [-o FILE] script.py [args...]``: run a script, record every backward pass."""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from typing import Any

from backstep.commands import add_script_arguments, target_argv, torch_problem


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "trace",
        help="run a script and record every backward pass to JSON lines",
        description="Run SCRIPT exactly as python would and record every backward pass, node "
        "by node, as JSON lines. Options go before the script; the rest belongs to it.",
    )
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="where to write the events (default: backstep-trace.jsonl; under "
                        "several ranks backstep-trace.rank{rank}.jsonl). {rank}, {local_rank} "
                        "and {pid} are filled in; under several ranks a name without them gets "
                        ".rank<N> before its suffix")
    parser.add_argument("--children", action="store_true",
                        help="also record forked child processes (DataLoader workers, "
                        "multiprocessing), each to FILE with its pid before the extension")
    # --every / --when / --after / --trips (engine/planned): which passes are written in full
    parser.add_argument("--every", default=None, metavar="K",
                        help="write one pass in K in full (every pass gets its history line)")
    parser.add_argument("--when", action="append", default=None, metavar="SPEC",
                        help="write only history until SPEC trips (repeatable; the --break "
                        "specs: nonfinite, norm:X, node, module:GLOB, leaf:NAME), then that "
                        "pass from the tripping node on and the next --after passes")
    parser.add_argument("--after", default="1", metavar="M",
                        help="passes written in full after a trip (default 1)")
    parser.add_argument("--trips", default="3", metavar="N",
                        help="trips written before only history again (default 3)")
    parser.add_argument("--tensors", action="store_true",
                        help="at each --when trip, save the tripping node's gradients and "
                        "saved tensors with torch.save, one file per trip in a folder beside "
                        "the trace (run.jsonl -> run.tensors/trip-1-pass-N.pt)")
    add_script_arguments(parser, main)


def trace_plan(args: argparse.Namespace) -> Any:
    """The ``TracePlan`` the options ask for; ValueError with its one line when bad."""
    from backstep.engine.plan import TracePlan

    def number(option: str, text: str | None) -> int | None:
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{option} needs a whole number, not {text!r}") from None

    return TracePlan(number("--every", getattr(args, "every", None)),
                     getattr(args, "when", None),
                     number("--after", getattr(args, "after", "1")) or 0,
                     number("--trips", getattr(args, "trips", "3")) or 0,
                     tensors=bool(getattr(args, "tensors", False)))


def child_path(output: str, pid: int) -> str:
    """Where a forked child's trace goes: ``run.jsonl`` -> ``run.<pid>.jsonl``."""
    root, ext = os.path.splitext(output)
    return f"{root}.{pid}{ext}"


def rank_output(template: str | None) -> str:
    """This rank's file for ``-o`` (``process.ranks``); the one note when a rank was put in."""
    from backstep.process import ranks

    here = ranks.from_environment()
    path, inserted = ranks.trace_path(template, here)
    if inserted and template is not None:
        ranks.say_inserted("backstep trace", template, here)
    return path


def overwrites_source(output: str, script: str | None) -> str | None:
    """Why writing the trace to ``output`` would destroy code (None: it would not). Opening it
    truncates it before the script runs: ``-o train.py train.py`` lost the script itself."""
    if not os.path.exists(output):
        return None
    if script is not None and os.path.exists(script) and os.path.samefile(output, script):
        return f"-o {output} is the script itself: not overwriting it"
    if output.endswith(".py") and os.path.isfile(output):
        return f"-o {output} is a Python file: not overwriting it (a trace is .jsonl)"
    return None


def open_trace_file(path: str, chosen: bool) -> Any:
    """``path`` opened for writing, truncated. A name the person did not choose (the default
    ``backstep-trace.jsonl``, a ``--children`` file) may sit in a shared directory where
    another user planted a symbolic link to a file of ours: never written through one, nor
    into a file that is not a regular one or not ours. OSError with a sentence if refused."""
    if chosen:
        return open(path, "wb")  # noqa: SIM115 - the caller's to close
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise OSError(exc.errno, "it is a symbolic link (not writing through it; "
                          "-o FILE names the file to write)") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file (-o FILE names the file "
                          "to write)")
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "it belongs to another user (not overwriting it; "
                          "-o FILE names the file to write)")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def main(args: argparse.Namespace) -> int:
    problem = torch_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    try:
        plan = trace_plan(args)
    except ValueError as exc:  # PlanError too
        print(f"backstep trace: {exc}", file=sys.stderr)
        return 2
    chosen = args.output is not None
    args.output = rank_output(args.output)
    # --tensors: their folder goes beside this rank's file (wherever the script may chdir to)
    plan.trace_path = os.path.abspath(args.output)
    refused = overwrites_source(args.output, args.script)
    if refused is not None:
        print(f"backstep trace: {refused}", file=sys.stderr)
        return 2
    try:
        stream = open_trace_file(args.output, chosen)  # lives as long as the script
    except OSError as exc:
        print(f"backstep trace: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not chosen:  # the default file: say where it goes, once, off the script's stdout
        print(f"backstep trace: writing {args.output} (-o FILE to choose)", file=sys.stderr,
              flush=True)
    from backstep.traces.compressed import GzipTrace, wants_gzip

    if wants_gzip(args.output):  # -o run.jsonl.gz: written compressed
        stream = GzipTrace(stream)
    from backstep.engine.recorder import JsonlRecorder
    from backstep.engine.runner import run_module, run_script
    from backstep.engine.session import Session, refuse_missing, session_event

    recorder = JsonlRecorder(stream)
    recorder.emit(session_event(target_argv(args)))
    recorder.flush()
    missing = None if args.module else refuse_missing(args.script, "backstep trace", recorder)
    if missing is not None:
        stream.close()
        return missing
    recorders = [recorder]  # this process's own: the last one

    def on_fork() -> Any:
        """In a forked child: the parent's file is not ours; maybe a file of our own."""
        recorders[-1].abandon()
        if not getattr(args, "children", False):
            return None
        name = child_path(args.output, os.getpid())
        try:
            child_stream = open_trace_file(name, False)
        except OSError as exc:
            print(f"backstep trace: not recording child {os.getpid()}: cannot write {name}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return None
        if wants_gzip(name):
            child_stream = GzipTrace(child_stream)
        recorders.append(JsonlRecorder(child_stream))
        return recorders[-1]

    from backstep.traces.output import recording

    session = Session(recorder, source=not args.no_source, on_fork=on_fork, plan=plan)
    # the script's prints go to the trace too (a forked child's to its own file, if any)
    from backstep.process.on_term import close_on_sigterm

    def on_sigterm() -> None:  # the file stays valid when the job is killed (process/on_term)
        session.exit(-15, None)
        if not recorders[-1].abandoned:
            recorders[-1].close()

    undo_sigterm = close_on_sigterm(on_sigterm)
    with session, recording(lambda event: recorders[-1].emit(event)):
        if args.module is not None:
            code = run_module(args.module, args.args, on_exit=session.exit)
        else:
            code = run_script(args.script, args.args, on_exit=session.exit)
    undo_sigterm()
    for own in recorders[-1:]:
        if not own.abandoned:
            cut = own.close()
            if cut is not None:  # the script's exit code stands: the trace is what failed
                print(cut, file=sys.stderr)
    return code
