"""The memory view (M): the pass in view's saved storages by module, op or line, draining as
the pass runs; the same rows as ``backstep memory``."""

from __future__ import annotations

import torch
import torch.nn as nn
from textual.widgets import Static

from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import ListRecorder
from backstep.traces.memory import rows
from backstep.tui.panels.memory import MemoryScreen
from backstep.tui.state.memory_table import memory_table
from backstep.tui.state.model import SessionModel
from tests.tui_fixtures import RecordingLink, live_app
from tests.tui_pilot import pilot


def mlp_events() -> list[dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16))
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    recorder = ListRecorder()
    capture, provenance = Capture(recorder), Provenance()
    capture.annotate = annotate  # as engine/session.py wires them
    capture.install()
    provenance.install()
    try:
        nn.functional.mse_loss(model(x), y).backward()
    finally:
        provenance.uninstall()
        capture.uninstall()
    events = [{"event": "session", "version": 1, "torch": torch.__version__, "argv": ["x"]}]
    return events + [dict(e) for e in recorder.events]


def test_the_table_drains_as_the_pass_runs() -> None:
    events = mlp_events()
    memory = next(e for e in events if e["event"] == "memory")
    model = SessionModel()
    nodes = 0
    held = []
    for event in events:
        model.apply(event)
        if event["event"] == "node":
            nodes += 1
            found = memory_table(model.snapshot().pass_)
            assert found is not None and found.step == nodes and found.total == memory["bytes"]
            held.append(found.held)
    assert held == sorted(held, reverse=True) and held[-1] == 0 and held[0] < memory["bytes"]
    found = memory_table(model.snapshot().pass_, "op")
    assert [r["key"] for r in found.rows] == [r["key"] for r in rows(memory, "op")]
    assert found.rows[0]["key"] == "TanhBackward0"
    assert found.rows[0]["bytes"] == 8 * 64 * 4 and found.rows[0]["storages"] == 1


def test_no_memory_event_no_table() -> None:
    events = [e for e in mlp_events() if e["event"] != "memory"]
    model = SessionModel()
    for event in events:
        model.apply(event)
    assert memory_table(model.snapshot().pass_) is None


@pilot
async def test_M_opens_the_table_and_b_regroups() -> None:
    app = live_app(RecordingLink(mlp_events()))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("M")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MemoryScreen)
        title = screen.query_one("#memory-box").border_title
        assert "Memory" in title and "pass 1" in title and "0 B of" in title
        table = screen.query_one("#memory-table", Static)
        assert screen.by == "module"
        await pilot.press("b")
        await pilot.pause()
        assert screen.by == "op" and table.content is not None
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, MemoryScreen)
