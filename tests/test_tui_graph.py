"""The graph panel on big graphs: shallow nesting, lazy building, every node once."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from backstep.tui.panels.graph import GraphPanel
from backstep.tui.state.graphlayout import TOP, GraphLayout
from backstep.tui.state.records import Graph
from tests.tui_fixtures import (
    RecordingLink,
    chain_pass,
    live_app,
    pass_begin,
    stop_at,
    transformer_pass,
)


def layout_of(event: dict) -> GraphLayout:
    return GraphLayout(Graph.build(event["nodes"], event["roots"]))


def all_node_rows(layout: GraphLayout) -> list[int]:
    """Every node row reachable by opening every container (iteratively)."""
    seen: list[int] = []
    stack = [TOP]
    while stack:
        for row in layout.rows(stack.pop()):
            if row.kind == "node":
                seen.append(row.node)
            if row.key is not None:
                stack.append(row.key)
    return seen


def test_every_node_appears_exactly_once_and_shared_nodes_get_links() -> None:
    layout = layout_of(pass_begin())
    rows = all_node_rows(layout)
    assert sorted(rows) == [1, 2, 3, 4, 5]
    # AccumulateGrad x (4) is reached from AddBackward0 and MulBackward0: one row, one link
    assert layout.links.get(3) == [4] or layout.links.get(2) == [4]


def test_a_20000_deep_chain_is_flat_and_chunked() -> None:
    layout = layout_of(chain_pass(20_000))
    top = layout.rows(TOP)
    assert all(row.kind == "chunk" for row in top)
    assert len(top) == math.ceil(20_000 / layout.chunk)
    assert sorted(all_node_rows(layout)) == list(range(1, 20_001))
    assert layout.reveal(19_999) == [("chunk", 1, 19_998 // layout.chunk)]


def test_nesting_stays_logarithmic_on_a_10000_node_residual_graph() -> None:
    event = transformer_pass(10_000)
    layout = layout_of(event)
    assert sorted(all_node_rows(layout)) == sorted(n["id"] for n in event["nodes"])
    assert layout.depth_bound() <= 2 * math.log2(len(event["nodes"])) + 2


def test_a_binary_tree_nests_at_most_log_deep() -> None:
    n = 4095
    nodes = [{"id": i, "name": "AddBackward0",
              "next": [2 * i, 2 * i + 1] if 2 * i + 1 <= n else [], "leaf": None,
              "source": None, "module": None} for i in range(1, n + 1)]
    layout = GraphLayout(Graph.build(nodes, [1]))
    assert layout.depth_bound() <= 2 * 12 + 2


def on_graph(event: dict, target: int, look: Callable[[GraphPanel], None]) -> None:
    """Mount the app on a big pass stopped at ``target`` and hand its graph panel to ``look``."""
    app = live_app(RecordingLink([event, stop_at(event, target)], stop=1))

    async def go() -> None:
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            look(app.query_one(GraphPanel))

    asyncio.run(go())


def run_app_on(event: dict, target: int) -> tuple[int, int]:
    """Mount the app on a big pass, stop at ``target``; return (tree lines, current line)."""
    result: dict[str, int] = {}

    def look(graph: GraphPanel) -> None:
        result["lines"] = len(graph._tree_lines)
        result["cursor"] = graph.cursor_line
        node = graph.cursor_node
        result["node"] = node.data.node if node is not None and node.data else -1

    on_graph(event, target, look)
    assert result["node"] == target
    return result["lines"], result["cursor"]


def test_ui_shows_the_stop_deep_in_a_20000_chain_without_recursion() -> None:
    lines, cursor = run_app_on(chain_pass(20_000), 15_000)
    assert lines < 500  # only the chunk holding node 15000 was built
    assert cursor > 0


def test_ui_on_a_10000_node_graph_builds_few_rows() -> None:
    event = transformer_pass(10_000)
    deep = min(n["id"] for n in event["nodes"] if n["name"] == "ReluBackward0")
    lines, _ = run_app_on(event, deep)
    assert lines < 1500


def test_rows_added_in_a_batch_invalidate_the_tree_once() -> None:
    """A pass change adds a hundred rows in one batch: the tree is invalidated once, at its
    end, and then lists every row, in order, as if each add had invalidated it."""
    event = transformer_pass(600)
    seen: dict[str, object] = {}

    def look(graph: GraphPanel) -> None:
        calls: list[int] = []
        real = graph._invalidate
        graph._invalidate = lambda: calls.append(1) or real()  # type: ignore[method-assign]
        before = len(graph._tree_lines)
        with graph.batch():
            for i in range(100):
                graph.root.add_leaf(f"row {i}")
            assert len(calls) == 100 and len(graph._tree_lines) == before  # held back
        seen["calls"] = len(calls)
        seen["more"] = len(graph._tree_lines) - before
        seen["tail"] = [str(line.node.label) for line in graph._tree_lines[-100:]]

    on_graph(event, event["roots"][0], look)
    assert seen["calls"] == 101  # the hundred held back, and the one at the end
    assert seen["more"] == 100
    assert seen["tail"] == [f"row {i}" for i in range(100)]
