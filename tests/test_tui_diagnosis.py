"""The diagnosis banner: model bookkeeping and pilot tests fed by synthetic ``diagnosis`` events."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from backstep.process.launcher import debuggee_command
from backstep.tui.app import BackstepApp
from backstep.tui.panels.diagnosis import DiagnosisBanner
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.help import HelpScreen
from backstep.tui.panels.source import SourcePanel
from backstep.tui.runtime.live_link import LiveLink
from backstep.tui.state.model import SessionModel
from backstep.tui.state.records import Related
from tests.tui_fixtures import (
    ACC_X,
    ADD,
    BACKWARD_LINE,
    MUL,
    OUT_LINE,
    POW,
    SOURCE_FILE,
    accumulating_diagnosis,
    diagnosis,
    example_events,
    live_app,
)
from tests.tui_pilot import line_with, make_app, pilot, screen_text

SIZE = (140, 42)
REPO = Path(__file__).resolve().parent.parent


def three() -> list[dict[str, Any]]:
    """Three distinct diagnoses on three nodes of the example pass, and one repeat."""
    return [
        diagnosis(node=ADD),
        diagnosis("inplace_modified", node=POW, title="A saved tensor was modified in place",
                  message="PowBackward0 saved self; an in-place op changed it.",
                  related=[{"role": "inplace_op", "file": SOURCE_FILE, "line": BACKWARD_LINE,
                            "code": "x.add_(1)"}]),
        diagnosis(node=ADD),  # the same cause again: shown once
        accumulating_diagnosis(),
    ]


def banner(app: BackstepApp) -> DiagnosisBanner:
    return app.query_one(DiagnosisBanner)


def source_title(app: BackstepApp) -> str:
    return str(app.query_one(SourcePanel).border_title)


def marked_line(app: BackstepApp) -> str:
    """The Source panel's highlighted line (pygments marks it with ❱)."""
    return line_with(screen_text(app), "❱")


async def feed(app: BackstepApp, pilot: Any, *events: dict[str, Any]) -> None:
    for event in events:
        app.driver.reader.feed(event)
    await pilot.pause()
    await pilot.pause()


# -- model ---------------------------------------------------------------------------------------

def test_model_keeps_diagnoses_in_order_once_per_cause() -> None:
    model = SessionModel()
    changed = [model.apply(ev) for ev in three()]
    assert changed == [True, True, False, True]
    diags = model.snapshot().diagnoses
    assert [(d.kind, d.node) for d in diags] == [
        ("graph_freed", ADD), ("inplace_modified", POW), ("grad_accumulating", ACC_X)]
    first = diags[0]
    assert first.title == "Backward through a graph that was already freed"
    assert first.severity == "error" and first.pass_ == 1
    assert first.source is not None and first.source["line"] == OUT_LINE
    assert first.related[0] == Related("freed_by", SOURCE_FILE, BACKWARD_LINE, "out.backward()")
    assert diags[2].severity == "warning"
    # same kind and node on another line is another cause
    assert model.apply(diagnosis(node=ADD, line=BACKWARD_LINE))
    assert len(model.snapshot().diagnoses) == 4


def test_model_tolerates_odd_diagnosis_fields() -> None:
    model = SessionModel()
    assert model.apply({"event": "diagnosis", "kind": "grad_none", "message": "m",
                        "severity": "fatal", "title": 3, "node": "7", "source": None,
                        "related": [None, {"role": "created", "line": "x"}]})
    diag = model.snapshot().diagnoses[0]
    assert diag.severity == "error" and diag.title == "" and diag.node is None
    assert diag.related == (Related("created", None, None, None),)


# -- the banner ----------------------------------------------------------------------------------

@pilot
async def test_no_banner_without_diagnoses() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert banner(app).display is False
        assert "dismiss" not in screen_text(app)
        assert "diagnos" not in line_with(screen_text(app), "pass 1", "backward")
        await pilot.press("d")  # nothing to show: a note, no banner
        await pilot.pause()
        assert banner(app).display is False
        await pilot.press("x")
        await pilot.pause()
        assert banner(app).display is False and app.selected == MUL


@pilot
async def test_banner_appears_selects_node_and_shows_source() -> None:
    app, _ = make_app(stop=3)  # paused before MulBackward0
    async with app.run_test(size=SIZE) as pilot:
        await feed(app, pilot, diagnosis(node=ADD))
        assert banner(app).display is True
        text = screen_text(app)
        head = line_with(text, "Backward through a graph that was already freed")
        assert "✗" in head and "graph_freed" in head and "pass 1" in head and "1 of 1" in head
        assert "d next · D previous · x dismiss" in head
        assert "needs the tensors it saved in the forward" in text
        assert "retain_graph=True on the first backward" in text  # wrapped, not cut
        freed = line_with(text, "freed by")
        assert f"tui_fixtures.py:{BACKWARD_LINE}" in freed and "out.backward()" in freed
        assert "print(x.grad, y.grad)" in line_with(text, "this backward")
        # the node is selected through the graph, the panels follow
        assert app.selected == ADD
        graph = app.query_one(GraphPanel)
        assert graph.cursor_node is not None and graph.cursor_node.data.node == ADD
        assert "Gradients · AddBackward0 #2" in text
        assert source_title(app) == f"Source · tui_fixtures.py:{OUT_LINE} · diagnosis"
        assert "out = (x * y + x) ** 2" in marked_line(app)
        assert "d 1 diagnosis" in line_with(text, "pass 1", "backward")
        assert banner(app).has_class("-error")


@pilot
async def test_source_shows_a_line_the_node_lacks() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=SIZE) as pilot:
        await feed(app, pilot, accumulating_diagnosis())
        assert app.selected == ACC_X  # a leaf: no forward line of its own
        assert banner(app).has_class("-warning") and not banner(app).has_class("-error")
        assert "⚠ .grad keeps accumulating across steps" in screen_text(app)
        assert source_title(app).endswith(f":{BACKWARD_LINE} · diagnosis")
        assert "out.backward()" in marked_line(app)
        # the person looks elsewhere: the Source panel follows the selection again
        app.query_one(GraphPanel).reveal(MUL)
        await pilot.pause()
        assert app.selected == MUL
        assert source_title(app) == f"Source · tui_fixtures.py:{OUT_LINE}"


@pilot
async def test_next_previous_and_dismiss_keys() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=SIZE) as pilot:
        await feed(app, pilot, *three())
        assert "1 of 3" in screen_text(app) and app.selected == ADD
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app)
        assert "2 of 3" in text and "A saved tensor was modified in place" in text
        assert "x.add_(1)" in line_with(text, "modified by")
        assert app.selected == POW and "Gradients · PowBackward0 #1" in text
        await pilot.press("d")
        await pilot.pause()
        assert "3 of 3" in screen_text(app) and app.selected == ACC_X
        await pilot.press("d")  # wraps
        await pilot.pause()
        assert "1 of 3" in screen_text(app) and app.selected == ADD
        await pilot.press("D")  # wraps back
        await pilot.pause()
        assert "3 of 3" in screen_text(app) and app.selected == ACC_X
        await pilot.press("D")
        await pilot.pause()
        assert "2 of 3" in screen_text(app)

        await pilot.press("x")
        await pilot.pause()
        text = screen_text(app)
        assert banner(app).display is False and "2 of 3" not in text
        assert "modified in place" not in text
        assert "d 3 diagnoses" in line_with(text, "pass 1", "backward")
        assert app.selected == POW  # the selection stays; the Source panel is the node's own
        assert source_title(app) == f"Source · tui_fixtures.py:{OUT_LINE}"

        await pilot.press("d")  # brings the banner back on the same diagnosis
        await pilot.pause()
        assert banner(app).display is True and "2 of 3" in screen_text(app)


@pilot
async def test_new_diagnoses_while_shown_and_while_dismissed() -> None:
    app, _ = make_app(stop=3)
    first, second, _, third = three()
    async with app.run_test(size=SIZE) as pilot:
        await feed(app, pilot, first)
        await feed(app, pilot, second)
        # a person reading the first one is not yanked away: the count grows
        assert "1 of 2" in screen_text(app) and app.selected == ADD
        await pilot.press("x")
        await pilot.pause()
        await feed(app, pilot, third)
        # dismissed, then something new: the banner comes back on the new one
        assert banner(app).display is True and "3 of 3" in screen_text(app)
        assert app.selected == ACC_X


@pilot
async def test_a_more_severe_diagnosis_takes_the_banner() -> None:
    app, _ = make_app(stop=3)
    info = diagnosis("retain_graph_unused", node=None, severity="info", line=BACKWARD_LINE,
                     title="retain_graph=True was not needed", related=[],
                     message="Pass 1 used retain_graph=True, which keeps every tensor saved.")
    async with app.run_test(size=SIZE) as pilot:
        await feed(app, pilot, info)
        assert banner(app).has_class("-info") and "1 of 1" in screen_text(app)
        await feed(app, pilot, accumulating_diagnosis())  # a warning after the info
        text = screen_text(app)
        assert banner(app).has_class("-warning") and "2 of 2" in text
        assert "⚠ .grad keeps accumulating across steps" in text
        assert app.selected == ACC_X  # its node, as for the first one shown
        await feed(app, pilot, diagnosis("retain_graph_unused", node=None, pass_=2,
                                         severity="info", title="another info", related=[]))
        text = screen_text(app)  # not more severe: the warning stays, the count grows
        assert "⚠ .grad keeps accumulating" in text and "2 of 3" in text
        await feed(app, pilot, diagnosis(node=ADD),
                   diagnosis("slow_node", node=POW, severity="warning", title="a warning"))
        text = screen_text(app)  # an error, then a warning: the error (the most severe new one)
        assert banner(app).has_class("-error") and "4 of 5" in text
        assert "✗ Backward through a graph that was already freed" in text


@pilot
async def test_diagnosis_after_the_script_exited() -> None:
    app, link = make_app(stop=1)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        assert "script exited with code 0" in screen_text(app)
        await feed(app, pilot, diagnosis(
            "retain_graph_unused", node=None, severity="info", line=BACKWARD_LINE,
            title="retain_graph=True was not needed", related=[],
            message="Pass 1 used retain_graph=True, which keeps every tensor its graph saved."))
        text = screen_text(app)
        assert "ℹ retain_graph=True was not needed" in text and banner(app).has_class("-info")
        assert "retain_graph_unused" in line_with(text, "1 of 1")
        assert "out.backward()" in marked_line(app)  # no node: the line alone is shown
        assert link.sent == [{"cmd": "finish"}]  # the keys of the banner send nothing


@pilot
async def test_diagnosis_on_a_node_of_another_pass() -> None:
    app, _ = make_app(stop=2)
    async with app.run_test(size=SIZE) as pilot:
        await feed(app, pilot, diagnosis(node=999, pass_=7))
        assert banner(app).display is True and "pass 7" in screen_text(app)
        assert app.selected == ADD  # not in the shown graph: the selection stays
        assert source_title(app).endswith(" · diagnosis")


@pilot
async def test_help_lists_the_diagnosis_keys() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "dismiss the diagnosis banner" not in screen_text(app)  # below the fold
        await pilot.press("end")  # the list is focused: the keyboard scrolls it
        await pilot.pause()
        text = screen_text(app)
        assert "d / D" in line_with(text, "next / previous diagnosis")
        assert "next / previous diagnosis" in text and "dismiss the diagnosis banner" in text


@pilot
async def test_a_stop_right_after_a_diagnosis_keeps_its_node_selected() -> None:
    # the engine diagnoses AddBackward0 as it runs; the next stop (before MulBackward0) follows
    events = example_events()
    ran_add = next(i for i, ev in enumerate(events)
                   if ev["event"] == "node" and ev["id"] == ADD)
    events.insert(ran_add + 1, diagnosis(node=ADD))
    app, link = make_app(stop=2, events=events)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        await pilot.pause()
        text = screen_text(app)
        assert "before MulBackward0 #3" in line_with(text, "pass 1", "backward")
        assert "1 of 1" in text and app.selected == ADD
        assert "Gradients · AddBackward0 #2" in text
        await pilot.press("n")  # the person moves on: stops select their node again
        await pilot.pause()
        assert app.selected == ACC_X and banner(app).display is True


@pilot
async def test_narrow_terminal_keeps_the_whole_title() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=(80, 24)) as pilot:
        await feed(app, pilot, diagnosis(node=ADD))
        text = screen_text(app)
        head = line_with(text, "1 of 1")
        assert "graph_freed" in head and "pass 1" in head
        assert "x dismiss" in head and "D previous" not in head  # the short hint: x hides it
        lines = text.splitlines()
        title = lines[0].split("graph_freed")[0].strip(" ▌✗") + " " + lines[1][:48].strip(" ▌")
        assert " ".join(title.split()) == "Backward through a graph that was already freed"


def test_live_debuggee_banner_on_backward_twice() -> None:
    """End to end: a real debuggee runs a pitfall script, the engine diagnoses it, the banner
    shows it with the node selected and its forward line in the Source panel."""
    script = REPO / "tests" / "pitfalls" / "backward_twice.py"
    link = LiveLink(debuggee_command(str(script), [], source=True))
    app = live_app(link)  # stops at each pass start; `c` goes on to the next one

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            deadline = time.monotonic() + 60
            while app.snapshot.exit is None or banner(app).current is None:
                assert time.monotonic() < deadline, "no diagnosis from the debuggee"
                if app.snapshot.stop is not None and not app.waiting:
                    await pilot.press("c")
                await pilot.pause(0.05)
            await pilot.pause(0.05)
            text = screen_text(app)
            assert "Backward through a graph that was already freed" in text
            assert "backward_twice.py:7" in line_with(text, "freed by")
            assert app.snapshot.pass_ is not None
            selected = app.snapshot.pass_.graph.nodes[app.selected or -1]
            assert selected.name == "PowBackward0"
            assert source_title(app) == "Source · backward_twice.py:6 · diagnosis"
            assert "out = x**3" in marked_line(app)

    try:
        asyncio.run(run())
    finally:
        link.close()
