"""A narrow graph row keeps its module path: it drops the source line, then the ``#id``, before
the module (docs/run.md), as LayerNorm and BatchNorm rows' long names leave little room."""

from __future__ import annotations

from backstep.tui.panels.graph import GraphPanel
from tests.tui_fixtures import RecordingLink, gpt_named_events, live_app
from tests.tui_pilot import pilot, settle


def labels(graph: GraphPanel) -> list[str]:
    """The graph's rows as drawn (their labels, fitted to the panel)."""
    return [line.node.label.plain for line in graph._tree_lines]


@pilot
async def test_a_layernorm_row_keeps_its_module_where_the_id_and_line_do_not_fit() -> None:
    events = gpt_named_events()
    for node in events[1]["nodes"]:
        if node["name"] == "NativeLayerNormBackward0":
            node["module"] = "model.transformer.ln_f"
    for size in ((80, 24), (100, 30), (120, 40), (200, 50)):
        app = live_app(RecordingLink(events, stop=1))
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            rows = [r for r in labels(app.query_one(GraphPanel))
                    if r.startswith("· Native")]
            assert rows, size
            for row in rows:  # the source line never stays where the module went
                assert ":24" not in row or "ln_f" in row, (size, row)
                if size == (200, 50):
                    assert row.endswith("transformer.ln_f"), row
