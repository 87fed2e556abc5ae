"""The ``backstep`` command: ``run``, ``trace``, ``demo``, ``connect`` and the trace tools."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from backstep._version import __version__

SUBCOMMANDS = ("run", "trace", "demo", "show", "diff", "export", "connect")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: just that subcommand's (the one named first on the
    command line: the others' modules are not imported, 10-15 ms of every ``trace`` start,
    under 1% of the polynomial tutorial's run)."""
    parser = argparse.ArgumentParser(
        prog="backstep",
        description="A terminal stepping debugger for PyTorch backward passes.",
    )
    parser.add_argument("--version", action="version", version=f"backstep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in (only,) if only in SUBCOMMANDS else SUBCOMMANDS:
        importlib.import_module(f"backstep.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. When our stdout is closed early (``backstep demo | head``), end quietly
    with status 1, as Python's documentation advises; a script's own output is not ours: what
    ``trace`` runs meets a closed pipe exactly as under plain python."""
    script_stdout = False
    try:
        try:
            words = sys.argv[1:] if argv is None else argv
            parser = build_parser(words[0] if words else None)
            args = parser.parse_args(words)
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
