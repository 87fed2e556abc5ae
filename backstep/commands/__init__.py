"""One module per subcommand; each has ``add_parser(subparsers)`` and ``main(args) -> int``.

They are imported only to build the parser, so none may import torch or textual at module level:
``backstep run`` must start the UI without loading torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def add_script_arguments(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
) -> None:
    """What ``run`` and ``trace`` share: ``--no-source``, then the script and its own argv, or
    ``-m MODULE`` and its argv (as ``python -m``: it ends the options)."""
    parser.add_argument("--no-source", action="store_true",
                        help="do not record the forward line and module of each node (faster)")
    parser.add_argument("--eager", action="store_true",
                        help="turn torch.compile off for the whole script: every node of a "
                        "compiled model is a stop with its line and module")
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
                        help="run a library module as a script, as python -m does (ends the "
                        "options: the rest is the module's own argv)")
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")

    def with_target(args: argparse.Namespace) -> int:
        if not script_target(args):
            parser.error("the following arguments are required: script (or -m MODULE)")
        if args.eager:  # before anything imports Dynamo; the debuggee inherits it
            from backstep.engine.compiled import eager

            eager.apply()
        return handler(args)

    parser.usage = "%(prog)s [options] (script.py | -m MODULE) [args ...]"
    # the script owns stdout: a pipe closed under it must fail for it exactly as under python
    parser.set_defaults(handler=with_target, script_stdout=True)


def script_target(args: argparse.Namespace) -> bool:
    """Settle what runs: ``args.module`` becomes the module's name or None, ``args.script``
    the script (None under ``-m``) and ``args.args`` its argv. False when neither was named."""
    module = getattr(args, "module", None)
    if module is None:
        args.module = None
        return args.script is not None
    if not module:
        return False
    rest = [args.script] if args.script is not None else []  # "-mpkg a": argparse split it
    args.module, args.script, args.args = module[0], None, [*module[1:], *rest, *args.args]
    return True


def target_argv(args: argparse.Namespace) -> list[str]:
    """The command line as python would have been given it, for the ``session`` event."""
    if args.module is not None:
        return ["-m", args.module, *args.args]
    return [args.script, *args.args]


def say(who: str, message: str) -> None:
    """``backstep WHO: message``, one line on stderr with its control characters shown as
    escapes: a message names files and carries words from a trace or a peer."""
    from backstep import safe_text

    print(f"backstep {who}: {safe_text.printable(message)}", file=sys.stderr)


WEB_DRIVER = "textual.drivers.web_driver:WebDriver"  # what textual-serve runs each UI under


def no_terminal(who: str, instead: str) -> bool:
    """True, after one line on stderr, when there is no terminal to draw the UI on (stdin or
    stdout is not one: ``</dev/null >file``): the UI would draw into a file and never end.
    A UI run by the browser server (textual-serve's web driver) has pipes, not a terminal."""
    import os

    if os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER:
        return False
    try:
        if os.isatty(0) and os.isatty(1):
            return False
    except OSError:
        pass
    say(who, f"no terminal to open the UI on (standard input and output must be one); {instead}")
    return True


def open_traces(who: str, *paths: str, partial: bool = False,
                strict: bool = False) -> list[Any] | None:
    """Index each trace (``traces.index.TraceIndex``); None, after one line on stderr naming the
    first that is not a trace and closing those already open: the command then exits 2.
    ``strict``: a malformed event is such an error (``diff``, ``export``), not a skipped line."""
    from backstep.traces.index import TraceIndex
    from backstep.traces.passes import TraceError

    opened: list[Any] = []
    try:
        for path in paths:
            opened.append(TraceIndex(path, partial=partial, strict=strict))
    except TraceError as exc:
        for index in opened:
            index.close()
        say(who, str(exc))
        return None
    return opened


def chosen_pass(who: str, index: Any, trace: str, number: int | None) -> int | None:
    """The pass ``--pass`` names (the first when it names none), or None after one line on
    stderr saying why there is none: the command then exits 2."""
    numbers = index.numbers()
    if not numbers:
        say(who, f"{trace} has no backward pass")
        return None
    chosen = numbers[0] if number is None else number
    if chosen not in index.passes:
        say(who, f"no pass {chosen} in {trace} (passes {numbers[0]}-{numbers[-1]})")
        return None
    return chosen


def torch_problem() -> str | None:
    """Why this torch cannot run backstep, in one line (None: it can). Checked before any
    script runs, without importing torch in this process."""
    from backstep.engine.torch_api import check

    return check()
