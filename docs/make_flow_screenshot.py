"""Regenerate docs/gradient-flow.svg: the real UI and debuggee on flow_example.py, the pass
finished (f), then the gradient-flow chart (F), at 140x42.

    python docs/make_flow_screenshot.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from backstep.process.launcher import debuggee_command
from backstep.tui.app import BackstepApp
from backstep.tui.live import LiveLink

HERE = Path(__file__).resolve().parent


async def shoot() -> None:
    app = BackstepApp(LiveLink(debuggee_command("flow_example.py", [])))
    async with app.run_test(size=(140, 42)) as pilot:

        async def until(ready, what: str, timeout: float = 60.0) -> None:
            end = time.monotonic() + timeout
            while not ready():
                if time.monotonic() > end:
                    raise TimeoutError(what)
                await pilot.pause(0.05)

        await until(lambda: app.snapshot.stop is not None, "the first stop")
        await pilot.press("f")
        await until(lambda: app.snapshot.exit is not None, "the script's exit")
        await pilot.press("F")
        await pilot.pause(0.3)
        (HERE / "gradient-flow.svg").write_text(app.export_screenshot(title="backstep run"))
        await pilot.press("escape", "q")


if __name__ == "__main__":
    import os

    os.chdir(HERE)
    os.environ["PYTHONWARNINGS"] = "ignore"  # keep torch's NumPy warning out of the console
    asyncio.run(shoot())
