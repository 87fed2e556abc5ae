"""The UI says where a sharded model communicates and that its gradients are this rank's
shards: ``⇄`` marks an FSDP post-backward (reduce-scatter) or DTensor redistribute node in the
graph, the Gradients panel says what it does, a shard's summary reads ``Shard(0) local [2, 4]
of [4, 4]`` and the Leaves panel's norms are said to be per shard."""

from __future__ import annotations

from typing import Any

from backstep.tui.panels.graph import GraphPanel
from backstep.tui.text.format import summary_line
from tests.tui_fixtures import ACC_X, MUL, example_events, summary
from tests.tui_pilot import SIZE, line_with, make_app, pilot, screen_text, settle

COMM = "FSDP post-backward of layers.1: reduce-scatter of its gradients into the shards"
SHARD = {"placements": ["Shard(0)"], "global_shape": [4, 4]}


def sharded_events() -> list[dict[str, Any]]:
    """The example pass, its MulBackward0 an FSDP post-backward and x's .grad a shard."""
    events = example_events()
    for event in events:
        if event["event"] == "pass_begin":
            next(n for n in event["nodes"] if n["id"] == MUL)["comm"] = COMM
        if event["event"] == "accumulate" and event["leaf"] == "x":
            event["after"] = {**summary([1.0, -2.0, 3.0, 0.5, 1.0, 1.0, 2.0, 2.0], [2, 4]),
                              "shard": SHARD}
            event["sharded"] = True
    return events


def test_a_shard_summary_names_its_placement_and_both_shapes() -> None:
    line = summary_line({**summary([1.0, 2.0], [2]), "shard": SHARD}).plain
    assert line.startswith("Shard(0) local [2] of [4, 4] float32 cpu")
    assert summary_line(summary([1.0, 2.0], [2])).plain.startswith("[2] float32 cpu")
    hostile = {**summary([1.0], [1]), "shard": {"placements": [7, "Shard(1)"],
                                                "global_shape": "x"}}
    assert summary_line(hostile).plain.startswith("Shard(1) local [1] of ? ")


@pilot
async def test_communication_is_marked_and_shards_are_said_to_be_local() -> None:
    app, _ = make_app(stop=5, events=sharded_events())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "MulBackward0 ⇄" in line_with(text, "MulBackward0", "#3")
        assert "⇄" not in line_with(text, "AddBackward0", "#2")
        assert "accumulated · local shards" in text
        graph = app.query_one(GraphPanel)
        graph.post_message(GraphPanel.NodeChosen(MUL))
        await settle(pilot)
        text = screen_text(app)
        assert "⇄ FSDP post-backward of layers.1:" in text and "reduce-scatter" in text
        graph.post_message(GraphPanel.NodeChosen(ACC_X))
        await settle(pilot)
        text = screen_text(app)
        assert ".grad at pass end (this rank's shard)" in text
        assert "Shard(0) local [2, 4] of [4, 4]" in text
        await pilot.press("F")
        await settle(pilot)
        assert "Gradient flow · local shards" in screen_text(app)
