"""The console's input line: offered when the script waits on stdin, enter sends the line
(echoed in the console), ctrl+d ends the input, and the stepping keys work again after."""

from __future__ import annotations

from typing import Any

from backstep.tui.messages import ConsoleOutput, InputWanted
from backstep.tui.panels.console import ConsolePanel
from tests.tui_fixtures import RecordingLink, example_events, live_app
from tests.tui_pilot import SIZE, pilot


class StdinLink(RecordingLink):
    def __init__(self) -> None:
        super().__init__(example_events())
        self.stdin: list[str] = []
        self.stdin_closed = False

    def write_stdin(self, text: str) -> bool:
        self.stdin.append(text)
        return not self.stdin_closed

    def close_stdin(self) -> None:
        self.stdin_closed = True


@pilot
async def test_input_line_sends_what_is_typed_and_ctrl_d_ends_stdin() -> None:
    link = StdinLink()
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        console = app.query_one(ConsolePanel)
        assert not console.stdin_line.display
        app.post_message(ConsoleOutput("name? ", "stdout"))
        app.post_message(InputWanted())
        await pilot.pause()
        assert console.stdin_line.display and console.stdin_line.has_focus
        await pilot.press("n", "o", "c")  # typed text, not the stepping keys
        assert not [m for m in link.sent if m.get("cmd") in ("step", "continue")]
        await pilot.press("enter")
        await pilot.pause()
        assert link.stdin == ["noc\n"]
        assert "name? noc" in console.text
        assert not console.stdin_line.display
        await pilot.press("n")  # back to stepping
        assert link.sent[-1] == {"cmd": "step"}
        app.post_message(InputWanted())
        await pilot.pause()
        await pilot.press("ctrl+d")
        await pilot.pause()
        assert link.stdin_closed and not console.stdin_line.display
        app.post_message(InputWanted())
        await pilot.pause()
        assert not console.stdin_line.display, "stdin has ended: nothing more to type"


@pilot
async def test_i_opens_the_line_by_hand_and_escape_leaves_it() -> None:
    link = StdinLink()
    app = live_app(link)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("i")
        console = app.query_one(ConsolePanel)
        assert console.stdin_line.has_focus
        await pilot.press("escape")
        assert not console.stdin_line.has_focus
        sent: list[dict[str, Any]] = link.sent
        await pilot.press("n")
        assert sent[-1] == {"cmd": "step"}
