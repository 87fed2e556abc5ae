"""The ``backstep`` command: ``run``, ``trace``, ``demo``, ``connect`` and the trace tools."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from backstep._version import __version__

SUBCOMMANDS = ("run", "trace", "demo", "show", "diff", "export", "connect")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="backstep",
        description="A terminal stepping debugger for PyTorch backward passes.",
    )
    parser.add_argument("--version", action="version", version=f"backstep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"backstep.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"backstep.commands.{name}":
                raise
            continue  # a subcommand not built into this copy
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. When our stdout is closed early (``backstep demo | head``), end quietly
    with status 1, as Python's documentation advises; a script's own output is not ours: what
    ``trace`` runs meets a closed pipe exactly as under plain python."""
    script_stdout = False
    try:
        try:
            parser = build_parser()
            args = parser.parse_args(sys.argv[1:] if argv is None else argv)
            script_stdout = bool(getattr(args, "script_stdout", False))
            code = int(args.handler(args) or 0)
            if argv is None and getattr(args, "quick_exit", False):  # the command line's own
                from backstep.process.quick_exit import end_process

                sys.stdout.flush()
                end_process(code)
            return code
        finally:
            if not script_stdout:
                sys.stdout.flush()  # here, where a closed pipe can still be caught
    except BrokenPipeError:
        _discard_stdout()
        return 1


def _discard_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's last flush has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
