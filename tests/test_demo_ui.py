"""Pilot: walk the graph_basics demo through the real UI and a real debuggee, and see the
narration change at the keyed steps: intro first, one text per stop, the outro at exit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from backstep import demos, narration
from backstep.launcher import debuggee_command
from backstep.tui.app import BackstepApp
from backstep.tui.live import LiveLink
from backstep.tui.narration_panel import NarrationPanel

REPO = Path(__file__).resolve().parent.parent


async def _until(pilot: object, ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)  # type: ignore[attr-defined]


def test_graph_basics_narration_follows_the_steps() -> None:
    demo = demos.find("graph_basics", REPO / "demos")
    assert demo is not None
    story = narration.load(demo.narration)
    link = LiveLink(debuggee_command(str(demo.script), [], source=True))
    app = BackstepApp(link, narration=story)
    seen: list[tuple[int, int, str]] = []

    async def walk() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            panel = app.query_one(NarrationPanel)
            assert panel.text == story.intro  # before the first stop
            expected = [
                "PowBackward0",
                "AddBackward0",
                "MulBackward0",
                "AccumulateGrad",
                "AccumulateGrad",
            ]
            for step, name in enumerate(expected, start=1):
                if step > 1:
                    await pilot.press("n")

                def at_step(step: int = step) -> bool:
                    stop = app.snapshot.stop
                    return stop is not None and (stop.pass_, stop.step) == (1, step)

                await _until(pilot, at_step, f"the stop before step {step}")
                await pilot.pause(0.05)
                stop = app.snapshot.stop
                assert stop is not None and stop.name == name
                seen.append((stop.pass_, stop.step, panel.text))
                assert panel.text == story.text_for(1, step, name)
            await pilot.press("n")  # the last node runs; the script prints and exits
            await _until(pilot, lambda: app.snapshot.exit is not None, "the script's exit")
            await pilot.pause(0.05)
            assert app.snapshot.exit.code == 0
            assert panel.text == story.outro

    try:
        asyncio.run(walk())
    finally:
        link.close()
    texts = [text for _, _, text in seen]
    assert len(set(texts)) == 5  # the narration changed at every keyed step
    assert "seed gradient" in texts[0] and "64" in texts[3] and "32" in texts[4]
