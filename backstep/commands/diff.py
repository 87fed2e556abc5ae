"""``backstep diff A.jsonl B.jsonl``: where two recorded runs' gradients part ways.

Exit code 0 when they agree, 1 when they differ, 2 when either file cannot be read: usable in CI
to guard a custom backward against its reference.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "diff",
        help="compare two traces and say where their gradients start to differ",
        description="Align two traces pass by pass and node by node (by graph position, not "
        "id) and report the first node whose incoming gradients and saved tensors agree but "
        "whose outgoing gradients differ. Exit 0: same, 1: different, 2: error.",
    )
    parser.add_argument("a", metavar="A.jsonl", help="the first trace (e.g. the reference)")
    parser.add_argument("b", metavar="B.jsonl", help="the second trace")
    parser.add_argument("--rtol", type=float, default=None,
                        help="relative tolerance (default by dtype: float32 1e-5, float64 1e-7, "
                        "float16 1e-3, bfloat16 1.6e-2)")
    parser.add_argument("--atol", type=float, default=None,
                        help="absolute tolerance (default by dtype: float32 1e-7, float64 1e-12, "
                        "half types 1e-5)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from backstep.commands import open_traces
    from backstep.traces.diff import Tolerance, diff

    opened = open_traces("diff", args.a, args.b)
    if opened is None:
        return 2
    a, b = opened
    with a, b:
        report = diff(a, b, Tolerance(args.rtol, args.atol))
    if args.json:
        print(json.dumps(report))
    else:
        print(render(report))
    return 0 if report["same"] else 1


def _where(finding: dict[str, Any]) -> str:
    parts = []
    if finding.get("pass") is not None:
        parts.append(f"pass {finding['pass']}")
    if finding.get("step") is not None:
        parts.append(f"step {finding['step']}")
    return ", ".join(parts)


def _source(finding: dict[str, Any]) -> str:
    source = finding.get("source")
    if not source:
        return "forward line not recorded"
    return f"{os.path.basename(source.get('file') or '?')}:{source.get('line')}  " \
           f"{(source.get('code') or '').strip()}"


def _num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _norms(values: list | None) -> str:
    if values is None:
        return "-"
    return ", ".join("None" if v is None else _num(v) for v in values) or "(none)"


def render(report: dict[str, Any]) -> str:
    """The text report: headline, the birth node with both sides' numbers, a little context."""
    lines = [f"backstep diff: A = {report['a']}", f"               B = {report['b']}"]
    lines += [f"note: {n}" for n in report["notes"]]
    if report["same"]:
        lines.append(f"no difference ({report['passes'][0]} pass(es) compared)")
        return "\n".join(lines)
    found = report["difference"]
    head = "structural difference" if found["kind"] == "structure" else "difference born"
    where = _where(found)
    lines.append(f"{head}{' at ' + where if where else ''}: {found['what']}")
    if found.get("node"):
        lines.append(f"  node     {found['node']}   module {found.get('module') or '-'}")
        lines.append(f"  forward  {_source(found)}")
    for detail in found.get("details") or []:
        lines.append(f"  differs  {detail}")
    if found.get("hint"):
        lines.append(f"  so       {found['hint']}")
    for side in found.get("sides") or []:
        for label in ("a", "b"):
            s = side[label]
            text = "None" if s is None else (
                f"shape {s['shape']} {s['dtype']}  norm {_num(s['norm'])}  min {_num(s['min'])}"
                f"  max {_num(s['max'])}  mean {_num(s['mean'])}")
            lines.append(f"  {side['slot']:<16} {label.upper()}: {text}")
    cause = report.get("cause")
    if cause and (cause.get("step"), cause.get("pass")) != (found.get("step"), found.get("pass")):
        lines.append(f"cause: saved tensors differ earlier at {_where(cause)}: {cause['node']} "
                     f"({_source(cause)})")
        lines += [f"  differs  {d}" for d in cause.get("details") or []]
    if report["context"]:
        lines.append("context (outgoing gradient norms, A | B):")
        for row in report["context"]:
            mark = ">" if row["step"] == found.get("step") else " "
            state = "same" if row["same"] else "DIFFERS"
            lines.append(f"  {mark} step {row['step']:<4} {row['node']:<24} "
                         f"{_norms(row['a'])} | {_norms(row['b'])}  {state}")
    return "\n".join(lines)
