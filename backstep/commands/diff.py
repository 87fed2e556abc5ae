"""``backstep diff A.jsonl B.jsonl``: where two recorded runs' gradients part ways.

Exit code 0 when they agree, 1 when they differ, 2 when either file cannot be read, holds an
event whose fields are not of their types (``events/spec``), or the tolerances are not ones:
usable in CI to guard a custom backward against its reference (a crash never reads as 1).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from backstep import safe_text
from backstep.traces.report import finding_lines, num


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "diff",
        help="compare two traces and say where their gradients start to differ",
        description="Align two traces pass by pass and node by node (by graph position, not "
        "id) and report the first node whose incoming gradients and saved tensors agree but "
        "whose outgoing gradients differ. A torch.compile run against an eager one (--eager) "
        "is aligned by leaf and by compiled region instead: the first region whose gradients "
        "differ and the leaves it feeds. Exit 0: same, 1: different, 2: error.",
    )
    parser.add_argument("a", metavar="A.jsonl", help="the first trace (e.g. the reference)")
    parser.add_argument("b", metavar="B.jsonl", help="the second trace")
    add_tolerance_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report as one strict-JSON object (non-finite numbers as "
                        "the strings \"nan\", \"inf\", \"-inf\")")
    parser.set_defaults(handler=main)


def add_tolerance_arguments(parser: argparse.ArgumentParser) -> None:
    """--rtol / --atol, for ``diff`` and ``show --against`` alike."""
    parser.add_argument("--rtol", type=float, default=None,
                        help="relative tolerance (default by dtype: float32 1e-5, float64 1e-7, "
                        "float16 1e-3, bfloat16 1.6e-2)")
    parser.add_argument("--atol", type=float, default=None,
                        help="absolute tolerance (default by dtype: float32 1e-7, float64 1e-12, "
                        "half types 1e-5)")


def tolerance_problem(args: argparse.Namespace) -> str | None:
    """Why --rtol or --atol cannot be a tolerance (nan, inf, negative), or None."""
    for name in ("rtol", "atol"):
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"--{name} must be a finite number >= 0, not {value}"
    return None


def main(args: argparse.Namespace) -> int:
    from backstep.commands import open_traces
    from backstep.traces.compiled_diff import compiled_side, diff_compiled
    from backstep.traces.diff import Tolerance, diff
    from backstep.traces.passes import TraceError

    problem = tolerance_problem(args)
    if problem is not None:
        print(f"backstep diff: {problem}", file=sys.stderr)
        return 2
    opened = open_traces("diff", args.a, args.b, strict=True)
    if opened is None:
        return 2
    a, b = opened
    try:
        with a, b:
            side = compiled_side(a, b)  # torch.compile against eager: by leaf and region
            report = (diff_compiled(a, b, side, Tolerance(args.rtol, args.atol)) if side
                      else diff(a, b, Tolerance(args.rtol, args.atol)))
        report = shortened(report)  # a 50 MB node name from a hostile trace is no report
        text = json_text(report) if args.json else render(report)
    except TraceError as exc:  # a malformed event met while reading a pass: 2, never 1
        print(f"backstep diff: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a crash must never read as "the traces differ"
        print(f"backstep diff: cannot compare {args.a} and {args.b}: {type(exc).__name__} "
              "(a bug in backstep: please report it)", file=sys.stderr)
        return 2
    print(text)
    return 0 if report["same"] else 1


def shortened(report: dict[str, Any]) -> dict[str, Any]:
    """The report with every string from the traces (names, files, code, notes) longer than
    ``limits.NAME_LIMIT`` cut to its start and its length; the two paths stay whole."""
    from backstep.traces.limits import shorten

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return shorten(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return {key: value if key in ("a", "b") else walk(value) for key, value in report.items()}


def json_text(report: dict[str, Any]) -> str:
    """The report as strict JSON: a non-finite number is written as the string "nan", "inf"
    or "-inf", as the trace itself writes them (``json.dumps`` alone would write Infinity)."""
    return json.dumps(_finite(report), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _values(values: list | None) -> str:
    if values is None:
        return "-"
    return ", ".join("None" if v is None else num(v) for v in values) or "(none)"


def render(report: dict[str, Any]) -> str:
    """The text report: headline, the birth node with both sides' numbers, a little context.
    Names, files and code come from the traces: their control characters were made visible as
    they were read (``TraceIndex``), the paths' are here, and what is left is checked last."""
    lines = [f"backstep diff: A = {safe_text.printable(str(report['a']))}",
             f"               B = {safe_text.printable(str(report['b']))}"]
    if report.get("mode") == "compiled":
        from backstep.traces.compiled_diff import render_compiled

        return safe_text.lines("\n".join(lines + render_compiled(report)))
    lines += [f"note: {n}" for n in report["notes"]]
    if report["same"]:
        lines.append(f"no difference ({report['passes'][0]} pass(es) compared)")
        return safe_text.lines("\n".join(lines))
    found = report["difference"]
    lines += finding_lines(found, report.get("cause"))
    if report["context"]:
        lines.append("context (outgoing gradients' norms, or the statistic that differs, A | B; "
                     "'in': a node that sends none, by what it received):")
        for row in report["context"]:
            mark = ">" if row["step"] == found.get("step") else " "
            state = "same" if row["same"] else "DIFFERS"
            into = "in " if row.get("incoming") else ""
            stat = row.get("stat") or "norm"
            if stat != "norm":  # the norm agrees: the statistic that does not, named
                into += f"{stat} "
            lines.append(f"  {mark} step {row['step']!s:<4} {row['node']!s:<24} "
                         f"{into}{_values(row['a'])} | {into}{_values(row['b'])}  {state}")
    return safe_text.lines("\n".join(lines))
