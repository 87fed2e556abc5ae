"""``region`` events: each compiled region of a pass, readable, next to its ``pass_begin``.

For every ``CompiledFunctionBackward`` node of a recorded pass: which compiled function it is,
its backward graph's ops in order (they run as one fused call: they are not steps), and the
names of the gradients it takes in (one per output of the compiled forward) and gives out (one
per input: a leaf's name, or the node the gradient flows on to).
"""

from __future__ import annotations

from typing import Any

from backstep.engine.compiled import region
from backstep.engine.compiled.artifacts import CompileLog
from backstep.engine.graph import display_name


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
        out = []
        names = graph.names
        for i, name in enumerate(names):
            if name != region.NAME:
                continue
            node = graph.nodes[i]
            found = region.describe(node, self.log)
            out.append({"event": "region", "pass": number, "id": graph.ids[i], **found,
                        "inputs": _inputs(graph, i, leaf_names),
                        "outputs": [f"output {k}" for k in range(_outputs(node))]})
        return out


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
