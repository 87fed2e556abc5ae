"""``region`` events: each compiled region of a pass, readable, next to its ``pass_begin``.

For every ``CompiledFunctionBackward`` node of a recorded pass: which compiled function it is,
its backward graph's ops in order (they run as one fused call: they are not steps), and the
names of the gradients it takes in (one per output of the compiled forward, named by the nodes that consumed that output in the
pass's graph: their name, module and forward line) and gives out (one per input: a leaf's
name, or the node the gradient flows on to).
"""

from __future__ import annotations

import os
from typing import Any

from backstep.engine.compiled import region
from backstep.engine.compiled.artifacts import CompileLog
from backstep.engine.graph import MODULE_KEY, SOURCE_KEY, display_name
from backstep.engine.pending_tags import metadata as node_metadata

NAMED = 3  # consumers named per output; more are counted


class Regions:
    """The compile log, listened to while backstep is installed, and the events it yields."""

    def __init__(self) -> None:
        self.log = CompileLog()

    def install(self) -> None:
        self.log.install()

    def uninstall(self) -> None:
        self.log.uninstall()

    def events(self, number: int, graph: Any, leaf_names: dict[int, str]) -> list[dict[str, Any]]:
        """One ``region`` event per compiled region in ``graph`` (none in most passes)."""
        out: list[dict[str, Any]] = []
        names = graph.names
        found_at = [i for i, name in enumerate(names) if name == region.NAME]
        if not found_at:
            return out
        consumed = _consumers(graph, set(found_at))
        for i in found_at:
            node = graph.nodes[i]
            found = region.describe(node, self.log)
            out.append({"event": "region", "pass": number, "id": graph.ids[i], **found,
                        "inputs": _inputs(graph, i, leaf_names),
                        "outputs": [output_name(graph, k, consumed.get((i, k), []))
                                    for k in range(_outputs(node))]})
        return out


def _consumers(graph: Any, regions: set[int]) -> dict[tuple[int, int], list[int]]:
    """(region index, output k) -> the nodes whose edge points at that output, in walk order
    (the edge's ``input_nr`` is read from ``next_functions`` only for edges into a region)."""
    out: dict[tuple[int, int], list[int]] = {}
    for j, edges in enumerate(graph.edges):
        hits = [e for e, target in enumerate(edges) if target in regions]
        if not hits:
            continue
        nexts = graph.nodes[j].next_functions
        for e in hits:
            target = edges[e]
            out.setdefault((target, int(nexts[e][1])), []).append(j)
    return out


def output_name(graph: Any, k: int, consumers: list[int]) -> str:
    """``output 0 → NllLossBackward0 #12 in model.head (train.py:30)``: what took the
    region's forward output ``k`` (so what its incoming gradient is), or ``output k``."""
    if not consumers:
        return f"output {k}"
    named = [_consumer(graph, j) for j in consumers[:NAMED]]
    more = f" (+{len(consumers) - NAMED} more)" if len(consumers) > NAMED else ""
    return f"output {k} → {', '.join(named)}{more}"


def _consumer(graph: Any, j: int) -> str:
    metadata = node_metadata(graph.nodes[j])
    text = f"{display_name(graph.names[j])} #{graph.ids[j]}"
    module, source = metadata.get(MODULE_KEY), metadata.get(SOURCE_KEY)
    if isinstance(module, str) and module:
        text += f" in {module}"
    if isinstance(source, dict) and isinstance(source.get("file"), str) \
            and isinstance(source.get("line"), int):
        text += f" ({os.path.basename(source['file'])}:{source['line']})"
    return text


def _inputs(graph: Any, i: int, leaf_names: dict[int, str]) -> list[str | None]:
    """What each gradient the region gives out feeds: a leaf's name, a node, or None."""
    out: list[str | None] = []
    for j in graph.edges[i]:
        if j is None:
            out.append(None)
        elif j in leaf_names:
            out.append(leaf_names[j])
        else:
            out.append(f"{display_name(graph.names[j])} #{graph.ids[j]}")
    return out


def _outputs(node: Any) -> int:
    """How many gradients come in: one per output of the compiled forward."""
    try:
        return len(node._input_metadata)
    except (AttributeError, TypeError):
        return 0
