"""The app over a driver: every key that moves the session is one call of the ``Driver``
protocol, whatever the driver is (here one that only records the calls)."""

from __future__ import annotations

from typing import Any

from backstep.tui.app import BackstepApp
from backstep.tui.messages import Evaluated, SnapshotReady
from backstep.tui.panels.goto import GotoDialog
from backstep.tui.state.model import SessionModel
from backstep.tui.state.snapshot import PassView, Snapshot
from tests.tui_fixtures import RecordingLink, example_events, live_app, upto_stop
from tests.tui_pilot import SIZE, pilot, screen_text, settle


class CallsDriver:
    """A session that records what the app asks of it, stopped before the example's first node."""

    title = None
    key_help: dict[str, str] = {}
    help_title = "keys"
    cannot_edit = None
    status = None

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.app: BackstepApp | None = None

    def offers(self, action: str) -> bool:
        return True

    def attach(self, app: BackstepApp) -> None:
        self.app = app

    def start(self) -> None:
        model = SessionModel()
        for event in upto_stop(1):
            model.apply(event)
        assert self.app is not None
        self.app.post_message(SnapshotReady(model.snapshot()))

    def step(self) -> bool:
        self.calls.append("step")
        return False

    def back(self, whole_pass: bool) -> bool:
        self.calls.append(("back", whole_pass))
        return True

    def other_pass(self, delta: int) -> bool:
        self.calls.append(("other_pass", delta))
        return True

    def resume(self, command: str) -> bool:
        self.calls.append(("resume", command))
        return False

    def jump(self, text: str) -> None:
        self.calls.append(("jump", text))

    def set_breakpoints(self, breakpoints: list[dict[str, Any]]) -> None:
        self.calls.append(("break", list(breakpoints)))

    def console(self) -> bool:
        return True

    def evaluate(self, req: int, source: str, snapshot: Snapshot,
                 selected: int | None) -> bool | None:
        self.calls.append(("eval", source, selected))
        assert self.app is not None
        self.app.post_message(Evaluated({"req": req, "text": "the answer: 42"}))
        return True

    def cancel(self) -> bool:
        return False

    def interrupt(self) -> bool:
        return False

    def tensor(self, request: dict[str, Any]) -> bool:
        return False

    def stdin(self) -> Any:
        return None

    def close(self, code: int | None) -> int | None:
        self.calls.append(("close", code))
        return 7

    def returncode(self) -> int | None:
        return None

    def history(self) -> tuple[PassView, ...]:
        return ()

    def dropped(self) -> tuple[int, int]:
        return 0, 0

    def flow_earlier(self) -> tuple[PassView, ...]:
        return ()


@pilot
async def test_the_keys_that_move_the_session_are_driver_calls() -> None:
    driver = CallsDriver()
    app = BackstepApp(driver)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("n", "p", "left_square_bracket", "right_square_bracket", "c", "C", "f")
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GotoDialog)
        await pilot.press("2", ":", "5", "enter")
        await pilot.pause()
        await pilot.press("b", "colon", *"1+1", "enter")
        await settle(pilot)
        assert "the answer: 42" in screen_text(app)
        await pilot.press("escape", "q")  # the console line gives the keys back first
        await pilot.pause()
    assert driver.calls == [
        "step", ("back", False), ("back", True), ("other_pass", 1), ("resume", "continue"),
        ("resume", "continue_back"), ("resume", "finish"), ("jump", "2:5"),
        ("break", [{"kind": "node", "pattern": "PowBackward0"}]), ("eval", "1+1", 1),
        ("close", None)]
    assert app.return_value == 7


@pilot
async def test_a_live_session_leaves_the_keys_it_lacks_unbound() -> None:
    link = RecordingLink(example_events(), stop=1)
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("g", "C")
        await pilot.pause()
        assert not isinstance(app.screen, GotoDialog) and link.sent == []
