"""The UI with two passes paused at once (two threads): the live passes listed, the line of
waiting stops shown, commands addressed to the shown stop, each pass's log kept apart."""

from __future__ import annotations

from typing import Any

from backstep.tui.app import BackstepApp
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.status import live_passes
from backstep.tui.runtime.link import LinkedApp
from backstep.tui.state.model import SessionModel
from tests.tui_fixtures import ADD, POW, STEPS, live_app, pass_begin, summary
from tests.tui_pilot import SIZE, line_with, pilot, screen_text


def begin(number: int, thread: str) -> dict[str, Any]:
    return dict(pass_begin(number), thread=thread)


def stopped(number: int, stop: int, step: int, thread: str, reason: str = "step") -> dict[str, Any]:
    node_id, name, outs, _, keep = STEPS[step - 1]
    return {"event": "stopped", "pass": number, "step": step, "id": node_id, "name": name,
            "reason": reason, "detail": None, "grad_outputs": [summary(outs)], "saved": keep,
            "after": False, "stop": stop, "thread": thread, "device": "cpu"}


def ran(number: int, step: int) -> dict[str, Any]:
    node_id, name, outs, ins, keep = STEPS[step - 1]
    return {"event": "node", "pass": number, "step": step, "id": node_id, "name": name,
            "grad_outputs": [summary(outs)], "grad_inputs": [summary([g]) for g in ins or []],
            "saved": keep, "error": None}


def waiting(*stops: tuple[int, int, int, str]) -> dict[str, Any]:
    return {"event": "waiting", "stops": [
        {"stop": s, "pass": p, "step": step, "id": STEPS[step - 1][0],
         "name": STEPS[step - 1][1], "thread": t, "device": "cpu"} for s, p, step, t in stops]}


SESSION = {"event": "session", "version": 1, "torch": "2.13.0+cpu", "argv": ["two.py"],
           "pid": 1}
# worker-1's pass 1 stops first; worker-2's pass 2 reaches its first node and waits in line
OPENING = [SESSION, begin(1, "worker-1"), stopped(1, 1, 1, "worker-1", "pass_start"),
           begin(2, "worker-2"), waiting((2, 2, 1, "worker-2"))]
# n on pass 1: pass 2's stop is shown; pass 1 runs its node and waits in line behind it
AFTER_STEP = [stopped(2, 2, 1, "worker-2", "pass_start"), waiting(), ran(1, 1),
              waiting((3, 1, 2, "worker-1"))]
# c on pass 2: pass 1's stop is shown again; pass 2 runs to its end meanwhile
AFTER_CONTINUE = [stopped(1, 3, 2, "worker-1"), waiting(),
                  *[ran(2, k) for k in range(1, 6)],
                  {"event": "pass_end", "pass": 2, "status": "ok", "error": None, "skipped": []}]


class ScriptedLink:
    """Feeds the opening events, then one chunk per resuming command."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.replies = [AFTER_STEP, AFTER_CONTINUE]
        self.app: LinkedApp | None = None  # the live driver

    def open(self, app: LinkedApp) -> None:
        self.app = app
        for event in OPENING:
            app.reader.feed(event)

    def send(self, message: dict[str, Any]) -> bool:
        self.sent.append(message)
        if message["cmd"] in ("step", "continue", "finish") and self.replies and self.app:
            for event in self.replies.pop(0):
                self.app.reader.feed(event)
        return True

    def close(self) -> None:
        pass

    def returncode(self) -> int | None:
        return 0


async def settled(app: BackstepApp, pilot: Any) -> None:
    """Everything the link fed is drawn: a stop is published at once, the events after it on
    the reader's next 0.1 s tick (flushed here, so a loaded machine cannot read in between)."""
    await pilot.pause()
    app.driver.reader.flush()
    await pilot.pause()


@pilot
async def test_two_live_passes_listed_and_stepped_in_turn() -> None:
    link = ScriptedLink()
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        graph = app.query_one(GraphPanel)
        status = line_with(screen_text(app), "pass 1", "backward")
        assert "before PowBackward0 #1 on worker-1 (cpu)" in status
        assert "1 pass waiting (#2 on worker-2)" in status
        assert str(graph.border_title).startswith("Graph · pass 1")
        assert str(graph.border_subtitle) == "#1 stopped · #2 waiting"  # threads don't fit
        assert "#1 stopped · #2 waiting" in screen_text(app)

        await pilot.press("n")
        await settled(app, pilot)
        assert link.sent == [{"cmd": "step", "stop": 1}]
        status = line_with(screen_text(app), "pass 2", "backward")
        assert "start of pass before PowBackward0 #1 on worker-2 (cpu)" in status
        assert "1 pass waiting (#1 on worker-1)" in status
        assert str(graph.border_title).startswith("Graph · pass 2")
        assert str(graph.border_subtitle) == "#1 waiting · #2 stopped"
        snap = app.snapshot
        assert live_passes(snap) == "#1 waiting (worker-1) · #2 stopped (worker-2)"

        await pilot.press("c")
        await settled(app, pilot)
        assert link.sent[-1] == {"cmd": "continue", "stop": 2}
        status = line_with(screen_text(app), "pass 1", "backward")
        assert "step 2 of 5" in status and f"before AddBackward0 #{ADD} on worker-1" in status
        assert "waiting" not in status
        assert str(graph.border_subtitle) == ""  # pass 2 ended: one live pass left
        # pass 1's node ran while pass 2 was shown: its log kept it
        assert app.snapshot.pass_ is not None and app.snapshot.pass_.record(POW) is not None


def test_a_pass_beginning_beside_a_stop_does_not_take_the_screen() -> None:
    model = SessionModel()
    for event in OPENING[:3]:
        model.apply(event)
    model.apply(begin(2, "worker-2"))
    snap = model.snapshot()
    assert snap.pass_ is not None and snap.pass_.number == 1 and snap.stop is not None
    assert [(p.number, p.state) for p in snap.live] == [(1, "stopped"), (2, "running")]
    model.apply(ran(2, 1))  # pass 2 records while pass 1 is shown
    model.apply(stopped(2, 2, 2, "worker-2"))
    snap = model.snapshot()
    assert snap.pass_ is not None and snap.pass_.number == 2
    assert snap.pass_.record(POW) is not None


def test_a_nested_pass_on_the_paused_thread_is_shown() -> None:
    model = SessionModel()
    for event in OPENING[:3]:
        model.apply(event)
    model.apply(begin(2, "worker-1"))  # the same thread went on: its stop is over
    snap = model.snapshot()
    assert snap.pass_ is not None and snap.pass_.number == 2 and snap.stop is None
