"""The expression console's input line in the live app: ``:`` and ``!`` open it at a stop,
enter sends an ``eval`` for the shown stop and the answer lands in the console panel (escaped),
up / down recall earlier lines, ctrl+c while a line runs sends ``cancel``, ``e`` offers an edit,
and an ``edit`` event marks the pass "edited by you" in the status line and the graph title."""

from __future__ import annotations

from typing import Any

from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.graph import GraphPanel
from tests.tui_fixtures import MUL, example_events, summary
from tests.tui_pilot import make_app, pilot, screen_text, settle


def evals(link: Any) -> list[dict[str, Any]]:
    return [m for m in link.sent if m.get("cmd") == "eval"]


async def ask(app: Any, pilot: Any, source: str) -> int:
    """Open the line, send ``source``; the ``req`` of the eval it sent."""
    await settle(pilot)
    await pilot.press("colon")
    app.query_one(ConsolePanel).expression_line.value = source
    await pilot.press("enter")
    await pilot.pause()
    return [m for m in app.driver.link.sent if m.get("cmd") == "eval"][-1]["req"]


def console_text(app: Any) -> str:
    return "\n".join(app.query_one(ConsolePanel).log_view.lines)


@pilot
async def test_colon_opens_the_line_and_enter_sends_an_eval_for_the_shown_stop() -> None:
    events = example_events()
    for number, event in enumerate(e for e in events if e["event"] == "stopped"):
        event["stop"] = 40 + number
    app, link = make_app(events=events)
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        await pilot.press("colon")
        line = app.query_one(ConsolePanel).expression_line
        assert line.display and line.has_focus
        for key in "grad_outputs[0].sum()":
            await pilot.press(key)
        await pilot.press("enter")
        await pilot.pause()
        sent = evals(link)
        assert len(sent) == 1 and sent[0]["source"] == "grad_outputs[0].sum()"
        assert sent[0]["stop"] == 40 and isinstance(sent[0]["req"], int)
        app.driver.reader.feed({"event": "evaluated", "req": sent[0]["req"], "ok": True,
                         "text": "tensor () float32 cpu\ntensor(1.)"})
        await settle(pilot)
        text = console_text(app)
        assert ">>> grad_outputs[0].sum()" in text and "tensor(1.)" in text
        assert "tensor(1.)" in screen_text(app)
        # the line stays open for the next question
        assert line.display and line.value == ""


@pilot
async def test_bang_opens_it_too_and_up_down_recall_history() -> None:
    app, link = make_app()
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        await pilot.press("exclamation_mark")
        line = app.query_one(ConsolePanel).expression_line
        for source in ("a = 1", "a + 1"):
            line.value = source
            await pilot.press("enter")
        await pilot.pause()
        assert [m["source"] for m in evals(link)] == ["a = 1", "a + 1"]
        line.value = "draft"
        await pilot.press("up")
        assert line.value == "a + 1"
        await pilot.press("up")
        assert line.value == "a = 1"
        await pilot.press("up")
        assert line.value == "a = 1"
        await pilot.press("down")
        assert line.value == "a + 1"
        await pilot.press("down")
        assert line.value == "draft"
        await pilot.press("escape")
        assert not line.display and app.query_one(GraphPanel).has_focus


@pilot
async def test_an_answer_with_markup_and_escapes_is_shown_as_text() -> None:
    app, link = make_app()
    async with app.run_test(size=(140, 42)) as pilot:
        req = await ask(app, pilot, "x")
        app.driver.reader.feed({"event": "evaluated", "req": req, "ok": False,
                         "text": "Traceback\n[red]boom[/] \x1b]0;title\x07"})
        await settle(pilot)
        text = console_text(app)
        assert "[red]boom[/]" in text and "\x1b" not in text and "\\x1b" in text


@pilot
async def test_ctrl_c_while_a_line_runs_sends_cancel_not_interrupt() -> None:
    app, link = make_app()
    async with app.run_test(size=(140, 42)) as pilot:
        req = await ask(app, pilot, "while True: pass")
        await pilot.press("ctrl+c")
        await pilot.pause()
        cmds = [m["cmd"] for m in link.sent]
        assert "cancel" in cmds and "interrupt" not in cmds
        app.driver.reader.feed({"event": "evaluated", "req": req, "ok": False,
                         "text": "KeyboardInterrupt: the evaluation was interrupted"})
        await settle(pilot)
        assert "KeyboardInterrupt" in console_text(app)


@pilot
async def test_the_line_is_refused_while_not_paused() -> None:
    app, link = make_app()
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        await pilot.press("c")  # resumes: the fixture runs the pass to its end
        await settle(pilot)
        await pilot.press("colon")
        assert not app.query_one(ConsolePanel).expression_line.display
        assert not evals(link)


@pilot
async def test_e_offers_an_edit_and_an_edit_event_marks_the_pass() -> None:
    app, link = make_app(stop=3)
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        assert "edited by you" not in screen_text(app)
        await pilot.press("e")
        line = app.query_one(ConsolePanel).expression_line
        assert line.has_focus and line.value == "zero_nonfinite()"
        await pilot.press("enter")
        await pilot.pause()
        assert evals(link)[0]["source"] == "zero_nonfinite()"
        app.driver.reader.feed({"event": "edit", "pass": 1, "step": 3, "id": MUL,
                         "name": "MulBackward0", "stop": 3, "slot": "grad_outputs",
                         "what": "zero_nonfinite()", "indices": [0],
                         "before": [summary([float("nan")])], "after": [summary([0.0])]})
        await settle(pilot)
        text = screen_text(app)
        status = text.splitlines()[-1]
        assert "edited by you" in status
        assert "╭─  edited by you  Graph · pa" in text
        assert app.snapshot.pass_ is not None
        assert app.snapshot.pass_.edits == ("zero_nonfinite() at MulBackward0 #3",)
