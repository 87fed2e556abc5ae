"""SVG snapshots of the main states at 140x42, and of the layout at 80x24, 110x32 and 160x48 (pytest-textual-snapshot; Textual is pinned).

Update after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update``
and look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from backstep.demo import catalog as demos
from backstep.demo import narration
from backstep.tui.app import BackstepApp
from backstep.tui.messages import ConsoleOutput
from tests.tui_fixtures import (
    ADD,
    MUL,
    RecordingLink,
    accumulating_diagnosis,
    diagnosis,
    example_events,
    live_app,
    long_name_events,
    summary,
    upto_stop,
)

SIZE = (140, 42)


def app_at(stop: int, events: list[dict[str, Any]] | None = None, **kwargs: Any) -> BackstepApp:
    return live_app(RecordingLink(example_events() if events is None else events, stop=stop),
                       **kwargs)


async def with_output(pilot: Pilot) -> None:
    pilot.app.post_message(ConsoleOutput("epoch 1\nloss 64.0\n", "stdout"))
    await pilot.pause()


def test_first_stop(snap_compare) -> None:
    assert snap_compare(app_at(1), terminal_size=SIZE)


def test_stopped_before_mul(snap_compare) -> None:
    assert snap_compare(app_at(3), terminal_size=SIZE, run_before=with_output)


def test_script_finished(snap_compare) -> None:
    async def finish(pilot: Pilot) -> None:
        await with_output(pilot)
        pilot.app.post_message(ConsoleOutput("tensor(64.) tensor(32.)\n", "stdout"))
        await pilot.press("f")
        await pilot.pause()

    assert snap_compare(app_at(1), terminal_size=SIZE, run_before=finish)


def test_script_raised(snap_compare) -> None:
    events = example_events()
    events[-1] = {"event": "exit", "code": 1, "traceback": (
        "Traceback (most recent call last):\n  File \"train.py\", line 7, in <module>\n"
        "    out.backward()\nRuntimeError: one of the variables needed for gradient "
        "computation has been modified by an inplace operation\n")}

    async def finish(pilot: Pilot) -> None:
        await pilot.press("f")
        await pilot.pause()

    assert snap_compare(app_at(1, events), terminal_size=SIZE, run_before=finish)


def test_nonfinite_gradient(snap_compare) -> None:
    events = upto_stop(3)
    events[-1] = dict(events[-1], reason="nonfinite", detail="grad_outputs[0] has 2 NaN/Inf",
                      grad_outputs=[summary([1.0, float("nan"), float("inf"), -0.5, 2.0, 0.0])])
    assert snap_compare(app_at(3, events), terminal_size=SIZE)


def test_help(snap_compare) -> None:
    assert snap_compare(app_at(1), terminal_size=SIZE, press=["question_mark"])


def test_breakpoint_dialog(snap_compare) -> None:
    app = app_at(3, breakpoints=[{"kind": "node", "pattern": "MulBackward*"},
                                 {"kind": "norm", "above": 1000.0}])
    assert snap_compare(app, terminal_size=SIZE, press=["B"])


def test_tensor_view(snap_compare) -> None:
    async def open_view(pilot: Pilot) -> None:
        await pilot.pause()
        app = pilot.app
        panel = app.query_one("#gradients")
        panel.focus()
        panel.highlighted = panel.get_option_index("grad_outputs:0")
        await pilot.press("enter")
        await pilot.pause()
        req = app.driver.link.sent[-1]["req"]
        app.driver.reader.feed({"event": "tensor", "req": req, "shape": [4, 8], "dtype": "float32",
                         "numel": 32, "offset": 0,
                         "values": [round(0.1 * i - 1.5, 2) for i in range(31)] + ["nan"]})
        await pilot.pause()

    assert snap_compare(app_at(3), terminal_size=SIZE, run_before=open_view)


def test_narrow_terminal(snap_compare) -> None:
    assert snap_compare(app_at(3), terminal_size=(80, 40))


def test_selected_node_differs_from_current(snap_compare) -> None:
    async def select_add(pilot: Pilot) -> None:
        pilot.app.query_one("#graph").reveal(2)
        await pilot.pause()

    app = app_at(4)
    assert app is not None and MUL
    assert snap_compare(app, terminal_size=SIZE, run_before=select_add)


def test_diagnosis_banner(snap_compare) -> None:
    async def diagnose(pilot: Pilot) -> None:
        await with_output(pilot)
        pilot.app.driver.reader.feed(diagnosis(node=ADD))
        pilot.app.driver.reader.feed(accumulating_diagnosis())
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app_at(3), terminal_size=SIZE, run_before=diagnose)


FIT_SIZES = [(80, 24), (110, 32), (160, 48)]


@pytest.mark.parametrize("size", FIT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_live_ui_fits(snap_compare, size: tuple[int, int]) -> None:
    """The live UI on a model's long dotted names, at a default terminal, a split pane, a big one."""
    app = live_app(RecordingLink(long_name_events(), stop=4))
    assert snap_compare(app, terminal_size=size, run_before=with_output)


@pytest.mark.parametrize("size", FIT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_demo_ui_fits(snap_compare, size: tuple[int, int]) -> None:
    """``backstep demo``'s UI (with its narration panel) at the same sizes."""
    demo = demos.find("graph_basics", Path(__file__).resolve().parent.parent / "demos")
    assert demo is not None
    app = app_at(3, narration=narration.load(demo.narration))
    assert snap_compare(app, terminal_size=size)


def test_gradient_flow(snap_compare) -> None:
    """F after the pass: the chart over the two leaves (one NaN), in model order."""
    events = long_name_events()
    for ev in events:
        if ev["event"] == "accumulate" and ev["leaf"].endswith("bias"):
            ev["after"] = summary([float("nan"), 1.0])

    async def finish(pilot: Pilot) -> None:
        await pilot.press("f")
        await pilot.pause()

    app = live_app(RecordingLink(events, stop=1))
    assert snap_compare(app, terminal_size=(110, 32), run_before=finish, press=["F"])


@pytest.mark.parametrize("size", [(80, 24), (110, 32)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_module_view(snap_compare, size: tuple[int, int]) -> None:
    """m: the nodes folded by module path, the current node's module unfolded."""
    app = live_app(RecordingLink(long_name_events(), stop=3))
    assert snap_compare(app, terminal_size=size, press=["m"])
