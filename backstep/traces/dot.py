"""One recorded pass as a Graphviz DOT graph: what ran, what was skipped, where NaNs appeared.

Each node is labelled with its name, module and forward line and coloured by how it ended;
each edge carries the norm of the gradient that flowed along it; each leaf shows its ``.grad``
norm after the pass. A trace may come from anyone: ids are written only as integers (an id
``1 [URL="javascript:..."]`` would be DOT), every label is quoted and escaped. Stdlib only.
"""

from __future__ import annotations

import os
from typing import Any

from backstep.safe_text import DotIdError, dot_id, dot_string
from backstep.traces.passes import Pass

COLOURS = {
    "ran": "#c8e6c9",
    "skipped": "#eeeeee",
    "failed": "#ff8a80",
    "nan": "#ffcc80",
    "pending": "#fff59d",
}


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


def _check_ids(one: Pass) -> None:
    """Every id that will be written as ``n{id}`` is an int (``DotIdError`` otherwise)."""
    for node in one.nodes:
        dot_id(node.get("id"))
        children = node.get("next") or []
        if not isinstance(children, list):
            raise DotIdError(f"node {node.get('id')}: next is not a list of ids")
        for child in children:
            if child is not None:
                dot_id(child)


def to_dot(one: Pass) -> str:
    """The DOT text of one pass (edges point the way gradients flow: root to leaves). Raises
    ``safe_text.DotIdError`` for a node id (or a ``next`` id) that is not an integer."""
    _check_ids(one)
    status = statuses(one)
    ran = {e["id"]: e for e in one.steps}
    grads = {}
    for event in one.events:
        if event.get("event") == "accumulate":
            grads[event.get("id")] = event.get("after")
    lines = [f"digraph pass_{one.number} {{",
             '  rankdir=TB; node [shape=box, style="rounded,filled", fontname="monospace", '
             'fontsize=10]; edge [fontname="monospace", fontsize=9];',
             f"  label={dot_string(f'backstep pass {one.number}')}; labelloc=t;"]
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
        lines.append(f"  n{dot_id(node['id'])} [label={dot_string(chr(10).join(parts))}, "
                     f"fillcolor={dot_string(COLOURS[state])}];")
    for node in one.nodes:
        event = ran.get(node["id"])
        outs = (event or {}).get("grad_inputs") or []
        for slot, child in enumerate(node.get("next") or []):
            if child is None:
                continue
            label = _norm(outs[slot]) if slot < len(outs) else ""
            attrs = f"label={dot_string(label)}" if event else 'style="dashed"'
            lines.append(f"  n{dot_id(node['id'])} -> n{dot_id(child)} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
