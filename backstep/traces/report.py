"""A diff's finding in words: the lines ``backstep diff`` prints about where two runs part, and
that ``backstep show --against`` shows beside the node (one renderer, so they say the same)."""

from __future__ import annotations

import os
from typing import Any


def where(finding: dict[str, Any]) -> str:
    parts = []
    if finding.get("pass") is not None:
        parts.append(f"pass {finding['pass']}")
    if finding.get("step") is not None:
        parts.append(f"step {finding['step']}")
    return ", ".join(parts)


def source(finding: dict[str, Any], key: str = "source") -> str:
    found = finding.get(key)
    if not found:
        return "forward line not recorded"
    return f"{os.path.basename(found.get('file') or '?')}:{found.get('line')}  " \
           f"{(found.get('code') or '').strip()}"


def num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def summary_text(s: dict[str, Any] | None) -> str:
    if s is None:
        return "None"
    return (f"shape {s['shape']} {s['dtype']}  norm {num(s['norm'])}  min {num(s['min'])}"
            f"  max {num(s['max'])}  mean {num(s['mean'])}")


def finding_lines(found: dict[str, Any], cause: dict[str, Any] | None) -> list[str]:
    """The headline, the node and its forward line, what differs, what that implies, both
    sides' numbers, and an earlier cause (saved tensors that differ first)."""
    head = "structural difference" if found["kind"] == "structure" else "difference born"
    at = where(found)
    lines = [f"{head}{' at ' + at if at else ''}: {found['what']}"]
    if found.get("node") and found.get("node_b"):  # a different op in B: both sides
        lines.append(f"  node     A: {found['node']}   module {found.get('module') or '-'}")
        lines.append(f"           B: {found['node_b']}   module {found.get('module_b') or '-'}")
        lines.append(f"  forward  A: {source(found)}")
        lines.append(f"           B: {source(found, 'source_b')}")
    elif found.get("node"):
        lines.append(f"  node     {found['node']}   module {found.get('module') or '-'}")
        lines.append(f"  forward  {source(found)}")
    lines += [f"  differs  {detail}" for detail in found.get("details") or []]
    if found.get("hint"):
        lines.append(f"  so       {found['hint']}")
    for side in found.get("sides") or []:
        for label in ("a", "b"):
            lines.append(f"  {side['slot']:<16} {label.upper()}: {summary_text(side[label])}")
    if cause and (cause.get("step"), cause.get("pass")) != (found.get("step"), found.get("pass")):
        lines.append(f"cause: saved tensors differ earlier at {where(cause)}: {cause['node']} "
                     f"({source(cause)})")
        lines += [f"  differs  {d}" for d in cause.get("details") or []]
    return lines
