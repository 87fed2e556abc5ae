"""``backstep export TRACE.jsonl --pass N --dot|--svg``: one pass as a Graphviz picture."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys


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
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from backstep.commands import open_traces
    from backstep.traces.dot import to_dot
    from backstep.traces.index import TraceError

    opened = open_traces("export", args.trace, strict=True)
    if opened is None:
        return 2
    index = opened[0]
    with index:
        if index.note():
            print(f"backstep export: note: {index.note()}", file=sys.stderr)
        numbers = index.numbers()
        if not numbers:
            print(f"backstep export: {args.trace} has no backward pass", file=sys.stderr)
            return 2
        number = numbers[0] if args.number is None else args.number
        if number not in index.passes:
            print(f"backstep export: no pass {number} in {args.trace} (passes "
                  f"{numbers[0]}-{numbers[-1]})", file=sys.stderr)
            return 2
        try:
            text = to_dot(index.read(number))
        except TraceError as exc:  # a malformed event in the pass
            print(f"backstep export: {exc}", file=sys.stderr)
            return 2
    data = text.encode()
    if args.svg:
        dot = shutil.which("dot")
        if dot is None:
            print("backstep export: --svg needs Graphviz's `dot` program (apt install graphviz, "
                  "brew install graphviz); --dot writes the DOT text without it", file=sys.stderr)
            return 2
        done = subprocess.run([dot, "-Tsvg"], input=data, capture_output=True, check=False)
        if done.returncode != 0:
            print(f"backstep export: dot failed: {done.stderr.decode(errors='replace').strip()}",
                  file=sys.stderr)
            return 2
        data = done.stdout
    if args.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    try:
        with open(args.output, "wb") as out:
            out.write(data)
    except OSError as exc:
        print(f"backstep export: cannot write {args.output}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    return 0
