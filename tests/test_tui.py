"""Pilot tests of the live UI, one or more per panel and per key, fed by synthetic event streams."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.text import Text
from textual.widgets import Input, Select

from backstep.tui.messages import ConsoleOutput, Disconnected, ServerError
from backstep.tui.panels.breakpoint_dialog import BreakpointDialog
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.help import HelpScreen
from backstep.tui.panels.tensorview import TensorView
from tests.tui_fixtures import (
    ACC_X,
    ADD,
    MUL,
    OUT_LINE,
    POW,
    RecordingLink,
    example_events,
    live_app,
    pass_begin,
    summary,
    upto_stop,
)
from tests.tui_pilot import SIZE, line_with, make_app, pilot, screen_text


async def open_tensor_view(app: Any, pilot: Any) -> None:
    """Select the stopped node's first incoming gradient and press enter on it."""
    panel = app.query_one(GradientsPanel)
    panel.focus()
    panel.highlighted = panel.get_option_index("grad_outputs:0")
    await pilot.press("enter")
    await pilot.pause()


@pilot
async def test_first_stop_status_graph_and_gradients() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        status = line_with(text, "pass 1", "backward")
        assert "step 1 of 5" in status
        assert "stopped: start of pass before PowBackward0 #1" in status
        assert "➜ PowBackward0" in text
        assert "· AddBackward0" in text and "· MulBackward0" in text
        assert "Gradients · PowBackward0 #1" in text
        assert "grad_output[0]" in line_with(text, "grad_output[0]")
        assert "value 1" in text
        assert "runs next" in text


@pilot
async def test_step_key_sends_step_and_panels_follow() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        assert link.sent == [{"cmd": "step"}]
        await pilot.press("n")
        await pilot.pause()
        text = screen_text(app)
        assert "✓ PowBackward0" in text and "✓ AddBackward0" in text
        assert "➜ MulBackward0" in text
        assert "step 3 of 5" in text and "before MulBackward0 #3" in text
        assert app.selected == MUL


@pilot
async def test_continue_and_finish_keys() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        assert link.sent == [{"cmd": "finish"}]
        text = screen_text(app)
        assert "script exited with code 0" in text
        # no longer paused: more keys send nothing
        await pilot.press("n", "c")
        await pilot.pause()
        assert link.sent == [{"cmd": "finish"}]

    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c")
        await pilot.pause()
        assert link.sent == [{"cmd": "continue"}]


@pilot
async def test_keys_do_nothing_while_running() -> None:
    events = upto_stop(1)[:2]  # session and pass_begin, no stop yet
    link = RecordingLink(events, stop=99)
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("n", "c", "f")
        await pilot.pause()
        assert link.sent == []
        assert "running" in screen_text(app)


@pilot
async def test_outgoing_gradients_name_their_targets() -> None:
    app, _ = make_app(stop=3)  # paused before MulBackward0: Pow and Add ran
    async with app.run_test(size=SIZE) as pilot:
        graph = app.query_one(GraphPanel)
        graph.reveal(ADD)
        await pilot.pause()
        assert app.selected == ADD
        text = screen_text(app)
        assert "Gradients · AddBackward0 #2" in text
        assert "grad_input[0] → MulBackward0 #3" in text
        assert "grad_input[1] → AccumulateGrad (x) #4" in text


@pilot
async def test_selecting_a_pending_node_says_it_has_not_run() -> None:
    app, _ = make_app(stop=1)
    async with app.run_test(size=SIZE) as pilot:
        app.query_one(GraphPanel).reveal(MUL)
        await pilot.pause()
        text = screen_text(app)
        assert "Gradients · MulBackward0 #3" in text
        assert "not reached yet" in text and "has not run" in text


@pilot
async def test_nonfinite_gradient_is_red() -> None:
    events = upto_stop(1)
    events[-1] = dict(events[-1], grad_outputs=[summary([1.0, float("nan"), float("inf")])])
    app, _ = make_app(events=events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        panel = app.query_one(GradientsPanel)
        prompt = panel.get_option("grad_outputs:0").prompt
        text = Text("\n").join(prompt.renderables[1:3])  # the summary, in two lines
        assert "2 NaN/Inf" in text.plain
        styles = [str(span.style) for span in text.spans]
        assert any("red" in s for s in styles)
        assert "nan" in screen_text(app)


@pilot
async def test_enter_opens_tensor_view_and_fetches_values() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_tensor_view(app, pilot)
        assert isinstance(app.screen, TensorView)
        request = link.sent[-1]
        assert request["cmd"] == "tensor" and request["node"] == POW
        assert request["slot"] == "grad_outputs" and request["index"] == 0
        app.driver.reader.feed({"event": "tensor", "req": request["req"], "shape": [3], "dtype": "float32",
                         "numel": 3, "offset": 0, "values": [1.5, "nan", -2.0]})
        await pilot.pause()
        text = screen_text(app)
        assert "1.5" in text and "nan" in text and "values 0–2 of 3" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TensorView)


@pilot
async def test_tensor_view_shows_a_served_error() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_tensor_view(app, pilot)
        req = link.sent[-1]["req"]
        app.post_message(ServerError("tensor is gone", req))
        await pilot.pause()
        assert "cannot fetch values: tensor is gone" in screen_text(app)


@pilot
async def test_saved_panel_lists_saved_tensors_and_totals() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "alive" in line_with(text, "other", "float32", "4 B")
        assert "alive" in line_with(text, "self", "float32", "4 B")
        totals = line_with(text, "pass 1", "held", "freed")
        assert "freed 4 B" in totals  # PowBackward0's self, freed once it ran
        app.query_one(GraphPanel).reveal(POW)
        await pilot.pause()
        text = screen_text(app)
        assert "freed" in line_with(text, "self", "float32")
        assert "scalar" in line_with(text, "exponent")


@pilot
async def test_saved_panel_shows_modified_in_place_with_versions() -> None:
    events = upto_stop(1)
    events[-1] = dict(events[-1], saved=[{"name": "self", "status": "modified", "shape": [2],
                                          "dtype": "float32", "bytes": 8,
                                          "version": {"saved": 0, "now": 1}}])
    app, _ = make_app(events=events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "modified v0→v1" in screen_text(app)


@pilot
async def test_leaves_panel_after_the_pass() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        text = screen_text(app)
        x_row = re.search(r"│ x\s+None\s+64\s+\+64\s+1\s+(█+[▏▎▍▌▋▊▉]?)", text)
        y_row = re.search(r"│ y\s+None\s+32\s+\+32\s+1\s+(█+[▏▎▍▌▋▊▉]?)", text)
        assert x_row and y_row, text

        def eighths(bar: str) -> int:
            return sum(8 if c == "█" else " ▏▎▍▌▋▊▉".index(c) for c in bar)

        assert eighths(x_row.group(1)) == 2 * eighths(y_row.group(1))  # bars scale with the norm
        assert "2/2 accumulated" in text


@pilot
async def test_leaves_count_passes_since_zeroed() -> None:
    events = example_events()[:-1]  # one pass, no exit
    second = [dict(ev, **{"pass": 2}) if "pass" in ev else ev for ev in example_events()[1:-1]]
    for ev in second:
        if ev["event"] == "accumulate":
            ev["before"] = ev["after"]
            ev["after"] = summary([2 * ev["after"]["values"][0]])
    link = RecordingLink(events + second, stop=6)  # the first stop of pass 2
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        text = screen_text(app)
        assert re.search(r"│ x\s+64\s+128\s+\+64\s+2\s", text), text


@pilot
async def test_source_panel_highlights_the_forward_line() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert f"Source · tui_fixtures.py:{OUT_LINE}" in text
        assert str(OUT_LINE) in line_with(text, "out = (x * y + x) ** 2")
        assert "y = torch.tensor(3.0" in text  # context lines
        app.query_one(GraphPanel).reveal(ACC_X)
        await pilot.pause()
        assert "no source recorded" in screen_text(app)


@pilot
async def test_source_panel_says_no_source_with_no_source_option() -> None:
    events = upto_stop(1)
    for node in events[1]["nodes"]:
        node["source"] = None
    app, _ = make_app(events=events, source=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "no source recorded (--no-source)" in screen_text(app)


@pilot
async def test_console_shows_partial_lines_and_traceback() -> None:
    events = example_events()
    events[-1] = {"event": "exit", "code": 1,
                  "traceback": "Traceback (most recent call last):\n  File \"t.py\", line 3, in "
                               "<module>\nRuntimeError: boom\n"}
    app, _ = make_app(events=events)
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(ConsoleOutput("loss: ", "stdout"))
        app.post_message(ConsoleOutput("0.25\nstep 2", "stdout"))
        await pilot.press("f")
        await pilot.pause()
        console = app.query_one(ConsolePanel)
        assert console.log_view.lines[:2] == ["loss: 0.25", "step 2"]
        text = screen_text(app)
        assert "RuntimeError: boom" in text
        assert "script exited with code 1" in text


@pilot
async def test_debuggee_death_is_reported() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(Disconnected(-9))
        await pilot.pause()
        text = screen_text(app)
        assert "the debuggee died (signal 9)" in text
        await pilot.press("n")
        await pilot.pause()
        assert app.waiting is False


class Story:
    title = "A tiny demo"
    intro = "Welcome to the demo."
    outro = "That was the demo."

    def text_for(self, pass_: int, step: int, node: str) -> str | None:
        return f"Now at **{node}** (step {step})." if node != "AddBackward0" else None


@pilot
async def test_narration_panel_only_with_a_narration() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not app.query("#narration")

    app, _ = make_app(narration=Story())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "A tiny demo" in text and "Now at PowBackward0 (step 1)." in text
        await pilot.press("n")
        await pilot.pause()
        assert "Now at PowBackward0" in screen_text(app)  # no text for Add: the last one stays
        await pilot.press("n")
        await pilot.pause()
        assert "Now at MulBackward0 (step 3)." in screen_text(app)
        await pilot.press("f")
        await pilot.pause()
        assert "That was the demo." in screen_text(app)


@pilot
async def test_b_toggles_a_breakpoint_on_the_selected_type() -> None:
    app, link = make_app(stop=3)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("b")
        await pilot.pause()
        assert link.sent[-1] == {"cmd": "break",
                                 "breakpoints": [{"kind": "node", "pattern": "MulBackward0"}]}
        assert "●1" in screen_text(app)
        await pilot.press("b")
        await pilot.pause()
        assert link.sent[-1] == {"cmd": "break", "breakpoints": []}


@pilot
async def test_breakpoint_dialog_adds_conditions() -> None:
    app, link = make_app(breakpoints=[{"kind": "nonfinite"}])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("B")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, BreakpointDialog)
        dialog.query_one("#bp-kind", Select).value = "module"
        await pilot.pause()
        dialog.query_one("#bp-value", Input).value = "model.enc.*"
        await pilot.press("enter")
        dialog.query_one("#bp-kind", Select).value = "norm"
        await pilot.pause()
        dialog.query_one("#bp-value", Input).value = "not a number"
        await pilot.press("enter")
        await pilot.pause()
        assert "needs a number" in screen_text(app)
        dialog.query_one("#bp-value", Input).value = "1e3"
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert link.sent[-1] == {"cmd": "break", "breakpoints": [
            {"kind": "nonfinite"},
            {"kind": "module", "pattern": "model.enc.*"},
            {"kind": "norm", "above": 1000.0},
        ]}


@pilot
async def test_help_opens_and_closes() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "finish the current pass" in text
        assert "back across passes" in line_with(text, "p ", "step back")
        assert "of the next pass" in line_with(text, "[ / ]", "review")
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pilot
async def test_ctrl_c_interrupts() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert link.sent[-1] == {"cmd": "interrupt"}


@pilot
async def test_q_closes_the_link_and_returns_the_exit_code() -> None:
    app, link = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert link.closed
    assert app.return_value == 0


@pilot
async def test_narrow_terminal_stacks_the_panels() -> None:
    """Graph and detail side by side, Source and Leaves in a row below them."""
    app, _ = make_app()
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        assert app.screen.has_class("-narrow")
        graph = app.query_one("#graph").region
        gradients = app.query_one("#gradients").region
        source = app.query_one("#source").region
        assert gradients.x >= graph.right and gradients.width > graph.width
        assert source.y >= gradients.bottom and source.y >= graph.bottom


@pilot
async def test_link_rows_jump_to_the_shared_node() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=SIZE) as pilot:
        graph = app.query_one(GraphPanel)
        graph.reveal(MUL)
        mul = graph._rows[MUL]
        mul.expand()
        graph._load(("node", MUL, 0))
        await pilot.pause()
        link_row = next(c for c in mul.children if c.data is not None and c.data.kind == "link")
        assert link_row.data.node == ACC_X
        graph.select_node(link_row)
        await pilot.pause()
        assert app.selected == ACC_X


@pytest.mark.parametrize("bad", [
    {"event": "node"},
    {"event": "pass_begin", "pass": "x"},
    {"event": "stopped", "pass": 1},
    {"event": "mystery", "pass": 1},
    {"event": "accumulate", "pass": 1, "leaf": 3},
    {"event": "pass_begin", "pass": [2], "nodes": []},
    {"event": "node", "pass": 1, "id": 99, "grad_outputs": "junk", "saved": [1, None]},
])
@pilot
async def test_malformed_events_never_crash_the_ui(bad: dict[str, Any],
                                                   lenient_model: None) -> None:
    """Fed past the reader's checks (which refuse them), as real use does not raise."""
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.driver.reader.feed(bad)
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert "before AddBackward0" in screen_text(app)


@pilot
async def test_second_pass_rebuilds_the_graph() -> None:
    events = upto_stop(1) + [pass_begin(2)]
    app, _ = make_app(events=events, stop=99)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "Graph · pass 2 · 5 nodes" in screen_text(app)


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_the_tensor_view_fits_the_terminal(size: tuple[int, int]) -> None:
    """Found on the regression example at 80x24: the tensor view was 110 columns wide, its
    right border off the screen and a row of 8 values wrapped in the middle."""
    app, link = make_app()
    async with app.run_test(size=size) as pilot:
        await open_tensor_view(app, pilot)
        request = link.sent[-1]
        app.driver.reader.feed({"event": "tensor", "req": request["req"], "shape": [20],
                                "dtype": "float32", "numel": 20, "offset": 0,
                                "values": [i + 0.5 for i in range(20)]})
        await pilot.pause()
        await pilot.pause()
        box = app.screen.query_one("#tensor-box").region
        assert app.screen.region.contains_region(box), (box, size)
        rows = screen_text(app).splitlines()
        assert rows[box.y][box.right - 1] == "█" and rows[box.bottom - 1][box.right - 1] == "█"
        inner = [r[box.x + 1:box.right - 1].split() for r in rows[box.y:box.bottom]]
        grid = [cells for cells in inner if cells and cells[0].isdigit()]
        starts = [int(cells[0]) for cells in grid]  # each row's index, then its values
        step = 8 if size[0] >= 110 else 4
        assert starts == list(range(0, 20, step)), grid
        assert [float(v) for cells in grid for v in cells[1:]] == [i + 0.5 for i in range(20)]
