"""A compiled region in the UI: its node opens on a folded group of its backward ops, labelled
as fused (not steps); an op shows its forward line in the Source panel; the Gradients panel
says what the node stands for; a region without ops shows its one-line reason. Every string
comes from the trace and is shown as it reads (no markup, control characters escaped)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.widgets import Tree

from backstep.traces.index import TraceIndex
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.graph import GraphPanel
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot, screen_text

HOSTILE = "[bold]x[/] \x1b[31mred"


def write_trace(path: Path, ops: list[dict[str, Any]], reason: str | None = None,
                outputs: list[str] | None = None) -> None:
    events: list[dict[str, Any]] = [
        {"event": "session", "version": 2, "torch": "test", "argv": ["t.py"], "pid": 1},
        {"event": "pass_begin", "pass": 1, "api": "backward", "roots": [1], "nodes": [
            {"id": 1, "name": "CompiledFunctionBackward", "next": [2, None, 3],
             "module": "model"},
            {"id": 2, "name": "AccumulateGrad", "next": [], "leaf": "model.lin.weight"},
            {"id": 3, "name": "AccumulateGrad", "next": [], "leaf": "model.lin.bias"}]},
        {"event": "region", "pass": 1, "id": 1, "aot_id": 0, "compile_id": "0/0",
         "function": {"file": "/x/t.py", "line": 7, "name": "forward"}, "ops": ops,
         "reason": reason, "inputs": ["model.lin.weight", None, "model.lin.bias"],
         "outputs": outputs or ["output 0"]},
    ]
    incoming = [{"shape": [2], "dtype": "float32", "norm": 1.0} for _ in outputs or ()]
    for step, node in enumerate((1, 2, 3), start=1):
        events.append({"event": "node", "pass": 1, "step": step, "id": node,
                       "name": "CompiledFunctionBackward" if node == 1 else "AccumulateGrad",
                       "grad_outputs": incoming if node == 1 else [], "grad_inputs": [],
                       "saved": [], "error": None})
    events.append({"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


OPS = [
    {"name": "mm", "op": "aten.mm.default", "module": "lin", "forward": "linear",
     "source": {"file": "/x/t.py", "line": 9, "code": "y = self.lin(x)"}},
    {"name": "tanh_backward", "op": HOSTILE, "module": HOSTILE, "forward": "tanh",
     "source": {"file": "/x/t.py", "line": 10, "code": "return torch.tanh(y)"}},
]


def _tree_rows(panel: GraphPanel) -> list[str]:
    rows = []
    stack = list(reversed(panel.root.children))
    while stack:
        node = stack.pop()
        rows.append(node.label.plain)
        if node.is_expanded:
            stack.extend(reversed(node.children))
    return rows


@pilot
async def test_a_region_opens_on_its_fused_ops(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_trace(path, OPS)
    with TraceIndex(path) as index:
        app = replay_app(index)
        async with app.run_test(size=(150, 44)) as pilot:
            await pilot.pause()
            panel = app.query_one(GraphPanel)
            rows = _tree_rows(panel)
            group = next(r for r in rows if r.startswith("◆"))
            assert group.startswith("◆ 2 fused ops, not steps")
            whole = screen_text(app)  # the Gradients panel of the stop: the whole note
            assert "compiled region forward (t.py:7) · 2 ops" in whole
            assert "not individually steppable" in whole
            assert "Source · t.py:7 · compiled function" in whole
            assert not any("aten.mm.default" in r for r in rows), "the group starts folded"
            region_node = next(n for n in panel.root.children[0].children
                               if n.data is not None and n.data.kind == "region")
            region_node.expand()
            await pilot.pause()
            rows = _tree_rows(panel)
            assert any("1 ▫ aten.mm.default lin :9" in r for r in rows)
            hostile = next(r for r in rows if r.startswith("2 ▫"))
            assert "[bold]x[/] \\x1b[31mred" in hostile  # as it reads, the escape shown
            # an op under the cursor: its forward line in Source, its region's gradients
            op_row = region_node.children[0]
            panel.move_cursor(op_row)
            await pilot.pause()
            screen = screen_text(app)
            assert "compiled op aten.mm.default" in screen
            assert "y = self.lin(x)" in screen or "t.py:9" in screen
            assert "Gradients · CompiledFunctionBackward #1" in screen


@pilot
async def test_an_unreadable_region_is_one_node_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_trace(path, [], reason="not an AOTAutograd region: its backward graph is not readable")
    with TraceIndex(path) as index:
        app = replay_app(index)
        async with app.run_test(size=(150, 44)) as pilot:
            await pilot.pause()
            rows = _tree_rows(app.query_one(GraphPanel))
            assert sum(r.startswith("◆") for r in rows) == 1
            assert any(r.startswith("◆ not an AOTAutograd region") for r in rows)  # cut to fit
            assert any("CompiledFunctionBackward" in r for r in rows)
            assert "not an AOTAutograd region" in screen_text(app)  # Gradients says so too
            assert isinstance(app.query_one(GraphPanel), Tree)


def _gradient_rows(panel: GradientsPanel) -> str:
    rows = []
    for i in range(panel.option_count):
        prompt = panel.get_option_at_index(i).prompt
        parts = prompt.renderables if isinstance(prompt, Group) else [prompt]
        rows += [p.plain for p in parts if isinstance(p, Text)]
    return "\n".join(rows)


@pilot
async def test_a_regions_incoming_gradients_are_named_in_the_gradients_panel(
        tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_trace(path, OPS, outputs=[
        "output 0 → AddmmBackward0 #7 in model.head (t.py:24)", "output 1",
        f"output 2 → {HOSTILE}"])
    with TraceIndex(path) as index:
        app = replay_app(index)
        async with app.run_test(size=(150, 44)) as pilot:
            await pilot.pause()
            assert "Gradients · CompiledFunctionBackward #1" in screen_text(app)
            screen = _gradient_rows(app.query_one(GradientsPanel))  # unwrapped
            assert "grad_output[0] ← output 0 → AddmmBackward0 #7 in model.head (t.py:24)" \
                in screen
            assert "\ngrad_output[1]" in screen and "grad_output[1] ←" not in screen  # unnamed
            assert "grad_output[2] ← output 2 → [bold]x[/] \\x1b[31mred" in screen  # as it reads
