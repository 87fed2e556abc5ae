"""``backstep run --rank N`` under torchrun: one rank opens the UI, the others stay plain.

torchrun starts the same command once per rank. Only rank N may own the terminal; every other
rank becomes the plain ``python script.py`` (or ``python -m module``) it would have been, by
``exec``: same process, same pid for the launcher to watch, no backstep left in it, so its
output, exit code and collectives are the script's own. ``--trace-others FILE`` records them
instead, as ``backstep trace -o FILE`` would. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import os
import sys

from backstep.process import ranks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rank", type=int, default=0, metavar="N",
                        help="under torchrun (several ranks): the rank that opens the UI; the "
                        "others run the script as plain python would (default: %(default)s)")
    parser.add_argument("--trace-others", metavar="FILE", default=None,
                        help="under several ranks: record the other ranks as `backstep trace "
                        "-o FILE` would ({rank} is filled in)")


def run_unless_ours(args: argparse.Namespace) -> int | None:
    """None when this process is the UI's (one process, or rank ``--rank``). Otherwise run the
    script here without the UI and return its exit code (or never return: ``exec``)."""
    here = ranks.from_environment()
    if not here.several:
        return None
    if not 0 <= args.rank < here.world_size:
        if here.rank == 0:
            print(f"backstep run: --rank {args.rank} is not a rank of this job "
                  f"(0 to {here.world_size - 1})", file=sys.stderr)
        return 2
    if here.rank == args.rank:
        return None
    if args.trace_others is not None:
        from backstep.commands import trace

        return trace.main(argparse.Namespace(
            output=args.trace_others, children=False, no_source=args.no_source,
            module=args.module, script=args.script, args=list(args.args)))
    target = ["-m", args.module] if args.module is not None else [args.script]
    argv = [sys.executable, *interpreter_options(sys.orig_argv), *target, *args.args]
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, argv)
    return None  # not reached


def interpreter_options(orig_argv: list[str]) -> list[str]:
    """The options python itself was started with (``-u`` from torchrun, ``-X dev``, ``-W``),
    so the plain rank runs under the same ones; not ``-m``/``-c`` and what follows."""
    options: list[str] = []
    i = 1
    while i < len(orig_argv):
        arg = orig_argv[i]
        if not arg.startswith("-") or arg in ("-", "--") or arg[1] in "mc":
            break
        options.append(arg)
        if arg in ("-W", "-X", "--check-hash-based-pycs") and i + 1 < len(orig_argv):
            options.append(orig_argv[i + 1])
            i += 1
        i += 1
    return options
