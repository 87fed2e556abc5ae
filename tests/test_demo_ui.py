"""Pilot: walk the graph_basics demo through the real UI and a real debuggee, and see the
narration change at the keyed steps: intro first, one text per stop, the outro at exit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from backstep.demo import catalog as demos
from backstep.demo import narration
from backstep.process.launcher import debuggee_command
from backstep.tui.panels.narration import NarrationPanel
from backstep.tui.runtime.live_link import LiveLink
from tests.tui_fixtures import graph_basics_at_step_3, live_app
from tests.tui_pilot import screen_text

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
    app = live_app(link, narration=story)
    seen: list[tuple[int, int, str]] = []

    async def walk() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            panel = app.query_one(NarrationPanel)
            assert panel.text == narration.render(story.intro, {})  # before the first stop
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
                assert panel.text == narration.render(story.text_for(1, step, name), {})
            await pilot.press("n")  # the last node runs; the script prints and exits
            await _until(pilot, lambda: app.snapshot.exit is not None, "the script's exit")
            await pilot.pause(0.05)
            assert app.snapshot.exit.code == 0
            assert panel.text == narration.render(story.outro, {})  # f"{{x.grad}}" -> f"{x.grad}"
            assert 'f"{x.grad}" prints 64.0' in panel.text

    try:
        asyncio.run(walk())
    finally:
        link.close()
    texts = [text for _, _, text in seen]
    assert len(set(texts)) == 5  # the narration changed at every keyed step
    assert "seed gradient" in texts[0] and "64" in texts[3] and "32" in texts[4]


def test_the_panel_fills_ids_saved_bytes_and_late_measured_values() -> None:
    """Fields are filled from what the UI has seen: node ids of earlier passes, the current stop's
    saved bytes, and measured lines the script printed, even when they arrive after the exit."""
    from textual.app import App, ComposeResult

    from backstep.tui.panels.console import ConsolePanel
    from backstep.tui.state.model import SessionModel

    story = narration.parse(
        'title = "t"\nintro = "before"\n'
        'outro = "diff {max_diff:.1e}"\n'
        "[[stop]]\npass = 2\nstep = 1\n"
        'text = "new node {id[2][1]}, was {id[1][1]}; saved {saved[self]} B"\n'
    )
    model = SessionModel()

    def node(pass_: int, id_: int) -> dict[str, object]:
        return {"id": id_, "name": "PowBackward0", "next": [None], "leaf": None, "source": None,
                "module": None}

    class Demo(App[None]):
        def compose(self) -> ComposeResult:
            yield ConsolePanel()
            yield NarrationPanel(story)

    async def walk() -> None:
        app = Demo()
        async with app.run_test() as pilot:
            panel = app.query_one(NarrationPanel)
            console = app.query_one(ConsolePanel)
            assert panel.text == "before"
            saved = [{"name": "self", "status": "alive", "shape": [32], "dtype": "float32",
                      "bytes": 128}]
            for pass_, id_ in ((1, 4), (2, 11)):
                model.apply({"event": "pass_begin", "pass": pass_, "api": "backward",
                             "retain_graph": False, "create_graph": False, "roots": [id_],
                             "nodes": [node(pass_, id_)]})
                model.apply({"event": "stopped", "pass": pass_, "step": 1, "id": id_,
                             "name": "PowBackward0", "reason": "step", "grad_outputs": [],
                             "saved": saved})
                panel.show(model.snapshot())
                model.apply({"event": "node", "pass": pass_, "step": 1, "id": id_,
                             "name": "PowBackward0", "grad_outputs": [], "grad_inputs": [],
                             "saved": saved, "error": None})
                model.apply({"event": "pass_end", "pass": pass_, "status": "ok", "error": None,
                             "skipped": []})
                panel.show(model.snapshot())
            assert panel.text == "new node 11, was 4; saved 128 B"
            model.apply({"event": "exit", "code": 0})
            panel.show(model.snapshot())
            assert panel.text == "diff …"  # the script's output has not arrived yet
            console.write("  checked: x\n  measured: max_diff = 1.5e-08\n")
            await pilot.pause(0.6)  # the panel looks again while a value is missing
            assert panel.text == "diff 1.5e-08"

    asyncio.run(walk())


def test_a_real_demo_fills_its_ids_and_outro_from_the_run() -> None:
    """detach_no_grad in the real UI: the stop before pass 2's decoder node names both node ids,
    and the outro carries the values the script measured (they arrive through the console)."""
    demo = demos.find("detach_no_grad", REPO / "demos")
    assert demo is not None
    story = narration.load(demo.narration)
    link = LiveLink(debuggee_command(str(demo.script), [], source=False))
    app = live_app(link, narration=story)
    ids: dict[tuple[int, int], int] = {}
    texts: list[str] = []

    async def walk() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            panel = app.query_one(NarrationPanel)
            while app.snapshot.exit is None:
                await _until(pilot, lambda: app.snapshot.stop is not None
                             or app.snapshot.exit is not None, "a stop or the exit")
                stop = app.snapshot.stop
                if stop is not None:
                    ids[(stop.pass_, stop.step)] = stop.id
                    await pilot.pause(0.05)
                    if (stop.pass_, stop.step) == (2, 4):
                        texts.append(panel.text)
                    await pilot.press("n")
                    await _until(pilot, lambda s=stop: app.snapshot.stop != s, "the next step")
            await _until(pilot, lambda: narration.MISSING not in panel.text, "the outro's values")
            texts.append(panel.text)

    try:
        asyncio.run(walk())
    finally:
        link.close()
    stop_text, outro = texts
    assert ids[(2, 4)] != ids[(1, 4)]
    assert f"(id {ids[(2, 4)]}; pass 1's was id {ids[(1, 4)]})" in stop_text
    assert outro.startswith("Checked: with detach()") and "own 80-byte storage" in outro
    assert "from\n0 to 1" in outro or "from 0 to 1" in outro


def test_narration_scrolls_inside_its_panel_at_80x24() -> None:
    """At 80x24 a stop's text is longer than the panel: it scrolls inside the bordered panel
    (the panel ends inside the screen, above the status line) and its last line can be reached."""
    app = graph_basics_at_step_3()

    async def walk() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            panel = app.query_one(NarrationPanel)
            text = panel.query_one("#narration-text")
            assert "MulBackward0 receives 16" in panel.text
            assert panel.region.bottom <= app.query_one("#status").region.y  # border on screen
            assert text.region.height > panel.scrollable_content_region.height
            assert panel.max_scroll_y == text.region.height - panel.scrollable_content_region.height
            panel.focus()
            await pilot.press("end")
            await pilot.wait_for_scheduled_animations()
            assert panel.scroll_y == panel.max_scroll_y > 0  # the last line is in view
            await pilot.press("home")
            await pilot.wait_for_scheduled_animations()
            assert panel.scroll_y == 0

    asyncio.run(walk())


def test_arithmetic_in_a_narration_is_not_read_as_emphasis() -> None:
    """graph_basics says ``16*3 = 48``: Markdown would take the stars for italics and print
    ``163 = 48``. Stars outside code spans are literal; code spans stay code."""
    app = graph_basics_at_step_3()

    async def walk() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            region = app.query_one(NarrationPanel).region
            lines = screen_text(app).splitlines()[region.y : region.bottom]
            shown = " ".join(" ".join(line[region.x + 2 : region.right - 2] for line in lines).split())
            assert "d(x*y)/dx = y" in shown and "16*3 = 48" in shown, shown

    asyncio.run(walk())


def test_as_markdown_keeps_code_and_bold_words_and_escapes_arithmetic() -> None:
    from rich.console import Console

    from backstep.tui.panels.narration import as_markdown

    console = Console(width=120, record=True, color_system=None)
    console.print(as_markdown("x**3 at 3 gives 3x**2 = 27, 16*3 = 48, **AND** `a*b`"))
    assert console.export_text().strip() == "x**3 at 3 gives 3x**2 = 27, 16*3 = 48, AND a*b"


def test_a_stop_without_its_own_text_says_which_stop_the_text_is_about() -> None:
    """Issue 44: at pass 1 step 4 and through pass 2 of nan_where the panel still read "Here the
    NaN is born. SqrtBackward0 receives ..." as if it were about the node stopped at."""
    from textual.app import App, ComposeResult

    from backstep.tui.state.model import SessionModel

    story = narration.parse(
        'title = "t"\nintro = "before"\n'
        '[[stop]]\npass = 1\nstep = 1\ntext = "Here the NaN is born."\n'
    )
    model = SessionModel()

    class Demo(App[None]):
        def compose(self) -> ComposeResult:
            yield NarrationPanel(story)

    def stop(pass_: int, step: int, id_: int, name: str) -> None:
        model.apply({"event": "stopped", "pass": pass_, "step": step, "id": id_, "name": name,
                     "reason": "step", "grad_outputs": [], "saved": []})

    async def walk() -> None:
        app = Demo()
        async with app.run_test() as pilot:
            panel = app.query_one(NarrationPanel)
            nodes = [{"id": i, "name": n, "next": [], "leaf": None, "source": None,
                      "module": None} for i, n in ((1, "SqrtBackward0"), (2, "AccumulateGrad"))]
            model.apply({"event": "pass_begin", "pass": 1, "api": "backward",
                         "retain_graph": False, "create_graph": False, "roots": [1],
                         "nodes": nodes})
            stop(1, 1, 1, "SqrtBackward0")
            panel.show(model.snapshot())
            assert panel.text == "Here the NaN is born."
            stop(1, 2, 2, "AccumulateGrad")
            panel.show(model.snapshot())
            assert panel.text.startswith("**No note for step 2.** The last note, about step 1 "
                                         "(`SqrtBackward0`):"), panel.text
            assert panel.text.endswith("Here the NaN is born.")
            model.apply({"event": "pass_end", "pass": 1, "status": "ok", "error": None,
                         "skipped": []})
            model.apply({"event": "pass_begin", "pass": 2, "api": "backward",
                         "retain_graph": False, "create_graph": False, "roots": [1],
                         "nodes": nodes})
            stop(2, 1, 1, "SqrtBackward0")
            panel.show(model.snapshot())
            assert "No note for pass 2 · step 1." in panel.text
            assert "about pass 1 · step 1 (`SqrtBackward0`)" in panel.text
            await pilot.pause(0)

    asyncio.run(walk())
