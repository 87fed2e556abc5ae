"""``backstep export TRACE.jsonl --pass N --dot|--svg``: one pass as a Graphviz picture."""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys

BIG = 2000  # nodes above which dot is slow: a pass of 6,380 ran 10 minutes


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export",
        help="write one recorded pass as a Graphviz graph (DOT or SVG)",
        description="Write one pass of a trace as a Graphviz graph: nodes labelled with name, "
        "module and forward line, coloured by status (ran, skipped, failed, NaN), edges "
        "labelled with gradient norms, leaves with their .grad norm.",
    )
    parser.add_argument("trace", metavar="TRACE.jsonl", help="a trace from `backstep trace`")
    parser.add_argument("--pass", dest="number", type=int, default=None, metavar="N",
                        help="the pass to export (default: the first)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--dot", action="store_true", help="Graphviz DOT text (the default)")
    kind.add_argument("--svg", action="store_true",
                      help="SVG, drawn by Graphviz's `dot` program (must be installed)")
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="where to write it (default: standard output)")
    parser.add_argument("--dot-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                        help="with --svg: stop Graphviz after this long (default: 60)")
    parser.set_defaults(handler=main)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def main(args: argparse.Namespace) -> int:
    from backstep.commands import chosen_pass, open_traces, say
    from backstep.safe_text import DotIdError
    from backstep.traces.dot import to_dot
    from backstep.traces.passes import TraceError

    opened = open_traces("export", args.trace, strict=True)
    if opened is None:
        return 2
    index = opened[0]
    with index:
        if index.note():
            say("export", f"note: {index.note()}")
        number = chosen_pass("export", index, args.trace, args.number)
        if number is None:
            return 2
        try:
            chosen = index.read(number)
            text = to_dot(chosen)
        except TraceError as exc:  # a malformed event in the pass
            say("export", str(exc))
            return 2
        except DotIdError as exc:  # written as DOT it could be an attribute list, a URL
            say("export", f"{args.trace}: pass {number}: {exc}")
            return 2
    data = text.encode()
    if args.svg:
        svg = draw(data, number, len(chosen.nodes), args.dot_timeout)
        if svg is None:
            return 2
        data = svg
    if args.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    try:
        with open(args.output, "wb") as out:
            out.write(data)
    except OSError as exc:
        say("export", f"cannot write {args.output}: {exc.strerror or exc}")
        return 2
    return 0


def draw(data: bytes, number: int, nodes: int, timeout: float) -> bytes | None:
    """The SVG Graphviz draws of ``data``; None after one line on stderr saying why not."""
    from backstep.commands import say

    dot = shutil.which("dot")
    if dot is None:
        say("export", "--svg needs Graphviz's `dot` program (apt install graphviz, "
            "brew install graphviz); --dot writes the DOT text without it")
        return None
    instead = "--dot writes the DOT text at once (draw it elsewhere, or a part of it)"
    if nodes > BIG:
        say("export", f"pass {number} has {nodes:,} nodes: Graphviz may take minutes "
            f"(stopped after {timeout:g} s, --dot-timeout); {instead}")
    try:
        done = subprocess.run([dot, "-Tsvg"], input=data, capture_output=True, check=False,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        say("export", f"Graphviz did not finish pass {number} ({nodes:,} nodes) in "
            f"{timeout:g} s: too big for dot; {instead}, or raise --dot-timeout")
        return None
    except OSError as exc:
        say("export", f"cannot run {dot}: {exc.strerror or exc}")
        return None
    if done.returncode != 0:
        say("export", f"dot failed ({_ended(done.returncode)})"
            f"{': ' + _said(done.stderr) if done.stderr.strip() else ''}")
        return None
    return done.stdout


def _ended(code: int) -> str:
    """How a child ended, in words: its exit status or the signal that killed it."""
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _said(stderr: bytes, limit: int = 300) -> str:
    """What a child wrote on stderr, as one line (say() shows its control characters as escapes)."""
    text = " | ".join(line.strip() for line in stderr.decode(errors="replace").splitlines()
                      if line.strip())
    return text if len(text) <= limit else text[:limit] + "…"
