"""Regenerate docs/screenshot.svg: the real UI and debuggee on screenshot_example.py, at 140x42.

    python docs/make_screenshot.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from backstep.process.launcher import debuggee_command
from backstep.tui.app import BackstepApp
from backstep.tui.graph import GraphPanel
from backstep.tui.live import LiveLink

HERE = Path(__file__).resolve().parent
STEPS = 4  # stop a few nodes into the pass: some done, one current, the rest pending


async def shoot() -> None:
    link = LiveLink(debuggee_command("screenshot_example.py", []))
    app = BackstepApp(link)
    async with app.run_test(size=(140, 42)) as pilot:

        async def until(ready, what: str, timeout: float = 60.0) -> None:
            end = time.monotonic() + timeout
            while not ready():
                if time.monotonic() > end:
                    raise TimeoutError(what)
                await pilot.pause(0.05)

        await until(lambda: app.snapshot.stop is not None, "the first stop")
        for step in range(2, STEPS + 1):
            await pilot.press("n")
            await until(lambda step=step: app.snapshot.stop is not None
                        and app.snapshot.stop.step == step and not app.waiting, f"step {step}")
        app.query_one(GraphPanel).focus()
        await pilot.pause(0.3)
        (HERE / "screenshot.svg").write_text(app.export_screenshot(title="backstep run"))
        await pilot.press("q")


if __name__ == "__main__":
    import os

    os.chdir(HERE)
    os.environ["PYTHONWARNINGS"] = "ignore"  # keep torch's NumPy warning out of the console
    asyncio.run(shoot())
