"""One recorded pass as a Graphviz DOT graph: what ran, what was skipped, where NaNs appeared.

Each node is labelled with its name, module and forward line and coloured by how it ended;
each edge carries the norm of the gradient that flowed along it; each leaf shows its ``.grad``
norm after the pass. Stdlib only.
"""

from __future__ import annotations

import os
from typing import Any

from backstep.traces.index import Pass

COLOURS = {
    "ran": "#c8e6c9",
    "skipped": "#eeeeee",
    "failed": "#ff8a80",
    "nan": "#ffcc80",
    "pending": "#fff59d",
}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _norm(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "None"
    norm = summary.get("norm")
    return f"{norm:.4g}" if isinstance(norm, float | int) else str(norm)


def statuses(one: Pass) -> dict[int, str]:
    """How each node ended: ran, skipped, failed (raised), nan (produced a non-finite gradient),
    or pending (the pass never finished)."""
    status: dict[int, str] = {}
    for event in one.steps:
        outs = [s for s in event.get("grad_inputs") or [] if s]
        if event.get("error"):
            status[event["id"]] = "failed"
        elif any(s.get("nonfinite") for s in outs):
            status[event["id"]] = "nan"
        else:
            status[event["id"]] = "ran"
    for event in one.events:  # a leaf whose .grad is now non-finite
        after = event.get("after") if event.get("event") == "accumulate" else None
        if after and after.get("nonfinite") and status.get(event.get("id")) == "ran":
            status[event["id"]] = "nan"
    rest = "skipped" if one.end is not None else "pending"
    for node in one.nodes:
        status.setdefault(node["id"], rest)
    return status


def to_dot(one: Pass) -> str:
    """The DOT text of one pass (edges point the way gradients flow: root to leaves)."""
    status = statuses(one)
    ran = {e["id"]: e for e in one.steps}
    grads = {}
    for event in one.events:
        if event.get("event") == "accumulate":
            grads[event.get("id")] = event.get("after")
    lines = [f"digraph pass_{one.number} {{",
             '  rankdir=TB; node [shape=box, style="rounded,filled", fontname="monospace", '
             'fontsize=10]; edge [fontname="monospace", fontsize=9];',
             f"  label={_quote(f'backstep pass {one.number}')}; labelloc=t;"]
    for node in one.nodes:
        parts = [str(node.get("name"))]
        if node.get("leaf"):
            parts.append(f"leaf {node['leaf']}")
        if node.get("module"):
            parts.append(str(node["module"]))
        source = node.get("source")
        if source:
            parts.append(f"{os.path.basename(str(source.get('file')))}:{source.get('line')}")
        if node["id"] in grads:
            parts.append(f".grad norm {_norm(grads[node['id']])}")
        state = status[node["id"]]
        if state != "ran":
            parts.append(f"({state})")
        lines.append(f"  n{node['id']} [label={_quote(chr(10).join(parts))}, "
                     f"fillcolor={_quote(COLOURS[state])}];")
    for node in one.nodes:
        event = ran.get(node["id"])
        outs = (event or {}).get("grad_inputs") or []
        for slot, child in enumerate(node.get("next") or []):
            if child is None:
                continue
            label = _norm(outs[slot]) if slot < len(outs) else ""
            attrs = f"label={_quote(label)}" if event else 'style="dashed"'
            lines.append(f"  n{node['id']} -> n{child} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
