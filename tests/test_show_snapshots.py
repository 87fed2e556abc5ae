"""SVG snapshots of the replay UI (``backstep show``) at 140x42: a step taken back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.pilot import Pilot

from backstep.traces.index import TraceIndex
from tests.tui_fixtures import example_events, replay_app

SIZE = (140, 42)


@pytest.fixture
def example_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The live UI tests' example session written as a trace (no stops: a trace has none)."""
    monkeypatch.chdir(tmp_path)
    lines = [json.dumps(e) for e in example_events() if e["event"] != "stopped"]
    Path("example.jsonl").write_text("\n".join(lines) + "\n")
    return "example.jsonl"


def test_stepped_back(snap_compare, example_trace: str) -> None:
    async def back(pilot: Pilot) -> None:
        for key in "nnnp":
            await pilot.press(key)
            await pilot.pause()

    index = TraceIndex(example_trace)
    try:
        assert snap_compare(replay_app(index), terminal_size=SIZE, run_before=back)
    finally:
        index.close()
