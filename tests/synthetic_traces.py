"""Traces written directly, without torch: many passes of a large residual network, for the
replay UI tests that need more nodes than a recorded script makes quickly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tui_fixtures import summary, transformer_pass


def write_transformer_trace(path: Path, passes: int, nodes: int,
                            norms: bool = False) -> None:
    """A trace of ``passes`` passes of ``transformer_pass(nodes)``, every node run; with
    ``norms``, every weight accumulates a gradient whose norm moves each pass."""
    lines: list[dict[str, Any]] = [
        {"event": "session", "version": 1, "torch": "test", "argv": ["t"], "pid": 1}]
    for number in range(1, passes + 1):
        begin = transformer_pass(nodes, number=number)
        lines.append(begin)
        for step, node in enumerate(begin["nodes"], start=1):
            lines.append({"event": "node", "pass": number, "step": step, "id": node["id"],
                          "name": node["name"], "grad_outputs": [], "grad_inputs": [],
                          "saved": [], "error": None})
            if norms and node["leaf"]:
                lines.append({"event": "accumulate", "pass": number, "leaf": node["leaf"],
                              "id": node["id"], "before": None,
                              "after": summary([float(number * 1000 + step), 0.0], [2]),
                              "retained": False})
        lines.append({"event": "pass_end", "pass": number, "status": "ok", "error": None,
                      "skipped": []})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))


def write_chain_trace(path: Path, ops: int) -> None:
    """One pass over a chain of ``ops`` nodes, each the only input of the one before (a graph
    as deep as it is long): node ``i`` sits at depth ``i``."""
    nodes = [{"id": i, "name": "MulBackward0", "next": [i + 1], "leaf": None, "source": None,
              "module": None} for i in range(ops)]
    nodes.append({"id": ops, "name": "AccumulateGrad", "next": [], "leaf": "x", "source": None,
                  "module": None})
    lines: list[dict[str, Any]] = [
        {"event": "session", "version": 1, "torch": "test", "argv": ["t"], "pid": 1},
        {"event": "pass_begin", "pass": 1, "api": "backward", "roots": [0], "nodes": nodes}]
    for step, node in enumerate(nodes, start=1):
        lines.append({"event": "node", "pass": 1, "step": step, "id": node["id"],
                      "name": node["name"], "grad_outputs": [summary([1.0], [1])],
                      "grad_inputs": [summary([1.0], [1])], "saved": [], "error": None})
    lines.append({"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
