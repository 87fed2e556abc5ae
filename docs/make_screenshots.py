"""Regenerate the README's and docs' pictures from the real UI and debuggee, at 140x42:

- docs/screenshot.svg: screenshot_example.py, a few nodes into the pass;
- docs/module-view.svg: modules_example.py, a few steps in, in the module view (m);
- docs/gradient-flow.svg: flow_example.py, the pass finished (f), the gradient-flow chart (F);
- docs/compiled-region.svg: compiled_example.py, a torch.compile region's ops opened, the
  cursor on one of them (its forward line in Source).

    python docs/make_screenshots.py [screenshot|module-view|gradient-flow ...]
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from backstep.process.launcher import debuggee_command
from backstep.tui.app import BackstepApp
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.runtime.live_driver import LiveDriver
from backstep.tui.runtime.live_link import LiveLink

HERE = Path(__file__).resolve().parent
Until = Callable[[Callable[[], bool], str], Awaitable[None]]


async def _steps(app: BackstepApp, pilot: Any, until: Until, last: int) -> None:
    for step in range(2, last + 1):
        await pilot.press("n")
        await until(lambda step=step: app.snapshot.stop is not None
                    and app.snapshot.stop.step == step and not app.waiting, f"step {step}")


async def _screenshot(app: BackstepApp, pilot: Any, until: Until) -> None:
    await _steps(app, pilot, until, 4)  # some done, one current, the rest pending
    app.query_one(GraphPanel).focus()


async def _module_view(app: BackstepApp, pilot: Any, until: Until) -> None:
    await pilot.press("m")
    await _steps(app, pilot, until, 13)


async def _gradient_flow(app: BackstepApp, pilot: Any, until: Until) -> None:
    await pilot.press("f")
    await until(lambda: app.snapshot.exit is not None, "the script's exit")
    await pilot.press("F")


async def _compiled_region(app: BackstepApp, pilot: Any, until: Until) -> None:
    panel = app.query_one(GraphPanel)
    await until(lambda: bool(panel._regions), "the region's ops")
    await pilot.pause(0.2)
    group = next(n for n in panel.root.children[0].children
                 if n.data is not None and n.data.kind == "region")
    group.expand()
    await pilot.pause(0.2)
    panel.focus()
    ops = [row for row in group.children if "gelu_backward" in row.label.plain]
    panel.move_cursor(ops[0] if ops else group.children[0])  # its line in Block.forward


SHOTS = {
    "screenshot": ("screenshot_example.py", _screenshot),
    "module-view": ("modules_example.py", _module_view),
    "gradient-flow": ("flow_example.py", _gradient_flow),
    "compiled-region": ("compiled_example.py", _compiled_region),
}


async def shoot(name: str) -> None:
    script, drive = SHOTS[name]
    app = BackstepApp(LiveDriver(LiveLink(debuggee_command(script, []))))
    async with app.run_test(size=(140, 42)) as pilot:

        async def until(ready: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
            end = time.monotonic() + timeout
            while not ready():
                if time.monotonic() > end:
                    raise TimeoutError(what)
                await pilot.pause(0.05)

        await until(lambda: app.snapshot.stop is not None, "the first stop")
        await drive(app, pilot, until)
        await pilot.pause(0.3)
        (HERE / f"{name}.svg").write_text(app.export_screenshot(title="backstep run"))
        await pilot.press("escape", "q")


if __name__ == "__main__":
    import os

    os.chdir(HERE)
    os.environ["PYTHONWARNINGS"] = "ignore"  # keep torch's NumPy warning out of the console
    for name in sys.argv[1:] or list(SHOTS):
        asyncio.run(shoot(name))
