"""``backstep demo``: list the narrated walkthroughs, or open one in the stepping UI."""

from __future__ import annotations

import argparse
import os
import sys

from backstep.demo import catalog as demos
from backstep.demo import narration


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="narrated walkthroughs that teach autograd by stepping through it",
        description="Without NAME (or with --list), list the demos. With NAME, step through it "
        "with narration.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="the demo to open")
    parser.add_argument("--list", action="store_true", help="list the demos (as with no NAME)")
    parser.add_argument(
        "--script",
        action="store_true",
        help="print the demo script's path (to read or copy it) instead of opening it",
    )
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    found = demos.all_demos()
    if getattr(args, "list", False):
        if args.name is not None or args.script:
            print("backstep demo: --list takes no NAME and no --script", file=sys.stderr)
            return 2
        return _list(found)
    if args.name is None:
        if args.script:
            print("backstep demo: --script needs a demo NAME", file=sys.stderr)
            return 2
        return _list(found)
    demo = next((d for d in found if d.name == args.name), None)
    if demo is None:
        names = ", ".join(d.name for d in found) or "none installed"
        print(f"backstep demo: no demo named {args.name!r}; demos: {names}", file=sys.stderr)
        return 2
    if args.script:
        print(demo.script)
        return 0
    try:
        narration.load(demo.narration)  # a broken file is reported here, before the UI starts
    except ValueError as exc:
        print(f"backstep demo: {exc}", file=sys.stderr)
        return 2
    from backstep.commands.run import launch  # lazily: it brings in the UI

    os.environ["PYTHONWARNINGS"] = quiet_numpy(os.environ.get("PYTHONWARNINGS"))
    return launch(str(demo.script), [], narration=str(demo.narration))


# torch without numpy (backstep's install brings none) warns as it is imported; the Console's
# first line, cut at its width, was this warning: a demo's reader has not asked for numpy
NUMPY_WARNING = "ignore:Failed to initialize NumPy:UserWarning"


def quiet_numpy(warnings: str | None) -> str:
    """``PYTHONWARNINGS`` for a demo's script: the person's own filters, then the one that
    drops torch's missing-numpy warning (the last filter given wins, as with ``-W``)."""
    return f"{warnings},{NUMPY_WARNING}" if warnings else NUMPY_WARNING


def _list(found: list[demos.Demo]) -> int:
    if not found:
        print("backstep demo: no demos found", file=sys.stderr)
        return 1
    width = max(len(d.name) for d in found)
    lines = []
    for demo in found:
        try:
            title = demo.title
        except ValueError as exc:
            title = f"(broken narration: {exc})"
        lines.append(f"{demo.name:<{width}}  {title}")
    print("\n".join(lines))  # a reader that leaves early (`| head`) is cli.main's to handle
    return 0
