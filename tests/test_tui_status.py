"""The status line cut to the terminal: the node's name and "? help" always, then the keys that
fit, in the order of HINTS (the keys #16 added among them)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from backstep.tui.panels.status import HELP, HINTS, status_text
from backstep.tui.state.model import SessionModel
from tests.tui_fixtures import RecordingLink, live_app, long_name_events, upto_stop
from tests.tui_pilot import pilot, screen_text


def stopped_at_mul() -> str:
    model = SessionModel()
    for event in upto_stop(3):
        model.apply(event)
    return model.snapshot()  # type: ignore[return-value]


def line(width: int) -> str:
    return status_text(stopped_at_mul(), waiting=False, gone=None,  # type: ignore[arg-type]
                       breakpoints=0, width=width).plain


def test_the_node_name_and_help_stay_at_80_columns() -> None:
    text = line(80)
    assert len(text) <= 80
    assert "before MulBackward0 #3" in text and text.rstrip().endswith("? help")


def test_the_stepping_keys_stay_bare_where_their_words_do_not_fit() -> None:
    for width in (70, 80):
        text = line(width)
        assert len(text) <= width and "before MulBackward0 #3" in text
        keys = text.split("#3", 1)[1].split()
        assert [k for k in keys if k in ("n", "c", "f")] == ["n", "c", "f"], text
        assert text.endswith(" ? help"), text


def test_keys_fill_in_order_as_the_line_widens() -> None:
    keys = [f" {key} {what}" for key, what in HINTS if (key, what) != HELP]
    before: list[str] = []
    for width in (80, 110, 140, 160, 200, 300):
        text = line(width)
        assert len(text) <= width and "before MulBackward0 #3" in text and " ? help" in text
        shown = [key for key in keys if key in text]
        assert shown == keys[: len(shown)]  # a prefix of HINTS: the same order at every size
        assert len(shown) >= len(before)
        before = shown
    assert before == keys  # at 300 columns all of them, m, /, F and z included


def test_without_a_width_nothing_is_cut() -> None:
    text = status_text(stopped_at_mul(), waiting=False, gone=None,  # type: ignore[arg-type]
                       breakpoints=0).plain
    assert all(f" {key} {what}" in text for key, what in HINTS)


LONG_NODE = "MyVeryLongCustomAutogradFunctionForFlashAttentionBackward"


def long_stop_events(detail: str | None = None) -> list[dict[str, Any]]:
    """The long-name fixture stopped at node 3, renamed to a custom Function's long name."""
    events = copy.deepcopy(upto_stop(3, long_name_events()))
    for event in events:
        if event["event"] == "pass_begin":
            for node in event["nodes"]:
                if node["id"] == 3:
                    node["name"] = LONG_NODE
        elif event["event"] == "stopped" and event["id"] == 3:
            event["name"], event["detail"] = LONG_NODE, detail
    return events


def test_a_long_node_name_is_cut_in_the_middle_and_help_stays() -> None:
    for detail in (None, "norm 3.2e+05 above the threshold of 1e+03 set with B"):
        model = SessionModel()
        for event in long_stop_events(detail):
            model.apply(event)
        for width in (80, 100, 110):
            text = status_text(model.snapshot(), waiting=False, gone=None,  # type: ignore[arg-type]
                               breakpoints=0, width=width).plain
            assert len(text) <= width and text.rstrip().endswith("? help"), text
            assert "step 3 of 5" in text and "#3" in text, text
            name = text.split(" before ", 1)[1].split(" #3", 1)[0]
            assert name[:3] == "MyV" and name.endswith("Backward"), text
            if width < 100:
                assert "…" in name, text


@pytest.mark.parametrize("detail", [None, "a long detail " * 6])
@pilot
async def test_status_line_fits_80_columns_with_long_names(detail: str | None) -> None:
    app = live_app(RecordingLink(long_stop_events(detail), stop=3))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        status = app.query_one("#status")
        assert app.screen.region.contains_region(status.region)
        last = screen_text(app).splitlines()[-1]
        assert last.rstrip().endswith("? help"), last
        assert "step 3 of 5" in last and "before MyV" in last and "Backward #3" in last, last


@pilot
async def test_a_disconnect_that_arrives_while_the_app_closes_is_not_a_crash() -> None:
    """The debuggee's socket can close while ``q`` tears the screens down: the handler then
    finds no panels to update, keeps the exit code it worked out, and raises nothing."""
    from backstep.tui.messages import Disconnected

    app = live_app(RecordingLink(long_stop_events(), stop=3))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
    app._disconnected(Disconnected(returncode=-9))  # every screen is gone by now
    assert app.exit_code == 137
    assert app.gone == "the debuggee died (signal 9)"


def nested_status(outer_node: str) -> str:
    model = SessionModel()
    model.apply({"event": "session", "version": 2, "torch": "t", "argv": ["x"], "pid": 1})
    model.apply({"event": "pass_begin", "pass": 1, "parent": None, "api": "backward",
                 "roots": [1], "nodes": [
                     {"id": 1, "name": "SumBackward0", "next": [2]},
                     {"id": 2, "name": outer_node, "next": []}]})
    model.apply({"event": "pass_begin", "pass": 2, "parent": 1, "api": "backward",
                 "roots": [7], "nodes": [{"id": 7, "name": "ReluBackward0", "next": []}]})
    return status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0,
                       width=100).plain


def test_a_reentrant_checkpoints_pass_says_it_is_the_recompute() -> None:
    assert " pass 2  (pass 1's recompute)" in nested_status("CheckpointFunctionBackward")
    assert " pass 2  (nested in pass 1)" in nested_status("MyFunctionBackward")


def test_at_80_columns_the_recompute_note_gives_way_before_the_node_name() -> None:
    model = SessionModel()
    model.apply({"event": "session", "version": 2, "torch": "t", "argv": ["x"], "pid": 1})
    model.apply({"event": "pass_begin", "pass": 1, "parent": None, "api": "backward",
                 "roots": [1], "nodes": [{"id": 1, "name": "CheckpointFunctionBackward",
                                          "next": []}]})
    model.apply({"event": "pass_begin", "pass": 2, "parent": 1, "api": "backward",
                 "roots": [15], "nodes": [{"id": 15, "name": "GeluBackward0", "next": []}]})
    model.apply({"event": "stopped", "pass": 2, "step": 1, "id": 15, "name": "GeluBackward0",
                 "reason": "pass_start", "detail": None, "grad_outputs": [], "saved": []})
    text = status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0,
                       width=80).plain
    assert len(text) <= 80 and "before GeluBackward0 #15" in text, text
    assert " pass 2  (pass 1" in text, text


@pilot
async def test_keys_pressed_while_the_script_runs_say_so_once() -> None:
    """Found running time_sequence_prediction at 80x24: n pressed five times while the script
    ran stacked five "not paused" notices, 15 of the screen's 24 rows."""
    from tests.tui_pilot import make_app

    app, link = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        link.app = None  # the script runs on: no stop comes
        await pilot.press("n")
        assert app.waiting
        for _ in range(5):
            await pilot.press("n")
        await pilot.pause()
        await pilot.pause()
        told = [n.message for n in app._notifications if "not paused" in n.message]
        assert len(told) == 1, told
