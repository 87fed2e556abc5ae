"""The ``backstep`` command: ``run``, ``trace`` and ``demo``."""

from __future__ import annotations

import argparse
import importlib
import sys

from backstep import __version__

SUBCOMMANDS = ("run", "trace", "demo", "show", "diff", "export")


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
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.handler(args) or 0)
