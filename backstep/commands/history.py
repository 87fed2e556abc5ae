"""``backstep history TRACE``: the run in brief, a row per pass (traces/history_file). No torch."""

from __future__ import annotations

import argparse
import csv
import math
import sys

from backstep.safe_text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "history",
        help="a trace's passes in brief: the loss and gradient norms, a row per pass",
        description="One row per pass of TRACE (every pass `backstep trace` saw, recorded in "
        "full or not): the loss, a gradient-norm column per leaf or module, the NaN/Inf count; "
        "the first pass with a non-finite gradient is marked.",
    )
    parser.add_argument("trace", metavar="TRACE", help="a trace written by backstep trace")
    parser.add_argument("--leaf", action="append", default=[], metavar="GLOB",
                        help="a column for each leaf whose name matches (repeatable)")
    parser.add_argument("--module", action="append", default=[], metavar="GLOB",
                        help="a column for each module that matches, its leaves' norms "
                        "combined (repeatable)")
    parser.add_argument("--csv", action="store_true",
                        help="comma-separated values with a header: pass, loss, the columns, "
                        "nonfinite (nan and inf written as such)")
    parser.set_defaults(handler=main)


def _text(value: float | None) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"


def _full(value: float | None) -> str:
    """A CSV cell: every digit (nan, inf and -inf as such), empty for no gradient."""
    if value is None:
        return ""
    return _text(value) if not math.isfinite(value) else repr(value)


def main(args: argparse.Namespace) -> int:
    from backstep.traces.compressed import open_lines
    from backstep.traces.history_file import HistoryError, columns, norm_of, read

    try:
        with open_lines(args.trace) as stream:  # a .gz trace streamed
            history = read(stream, args.trace)
    except HistoryError as exc:
        print(f"backstep history: {printable(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"backstep history: cannot read {printable(args.trace)}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    cols = columns(history, args.leaf, args.module)
    if not cols:
        print(f"backstep history: no leaf or module matches "
              f"{printable(' '.join(args.leaf + args.module))}", file=sys.stderr)
        return 2
    out = sys.stdout
    titles = [printable(c.title) for c in cols]
    first_bad = next((row.n for row in history.rows if row.bad), None)
    if args.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["pass", "loss", *titles, "nonfinite"])
        for row in history.rows:
            writer.writerow([row.n, _full(row.loss), *(_full(norm_of(row, c)) for c in cols),
                             row.bad])
        return 0
    widths = [max(11, len(t)) for t in titles]
    out.write("  pass  " + f"{'loss':>11}  " + "  ".join(
        f"{t:>{w}}" for t, w in zip(titles, widths, strict=True)) + "  nonfinite\n")
    for row in history.rows:
        cells = "  ".join(f"{_text(norm_of(row, c)):>{w}}"
                          for c, w in zip(cols, widths, strict=True))
        mark = "  <- first non-finite" if row.n == first_bad else ""
        out.write(f"{row.n:>6}  {_text(row.loss):>11}  {cells}  {row.bad:>9}{mark}\n")
    if not history.rows:
        out.write("(no history lines: a trace from before history, or no backward pass)\n")
    elif first_bad is not None:
        row = next(r for r in history.rows if r.n == first_bad)
        names = [history.names[n] if n < len(history.names) else f"leaf {n}"
                 for n in sorted(row.nonfinite)]
        shown = ", ".join(printable(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")
        out.write(f"first non-finite gradient: pass {first_bad} ({shown})\n")
    return 0
