"""``backstep show``: the replay UI driven by keys (pilot), and end to end in a pty."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backstep.cli import main
from backstep.traces.index import TraceIndex
from backstep.tui.app import BackstepApp
from backstep.tui.panels.goto import GotoDialog, parse_goto
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.text.format import GLYPHS
from tests.replay_traces import record
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot, screen_text

SCRIPT = """\
import torch

torch.manual_seed(0)
lin = torch.nn.Linear(3, 3)
x = torch.randn(4, 3)
for _ in range(2):
    y = torch.tanh(lin(x)).sum()
    y.backward()
a = torch.tensor([1.0, -1.0], requires_grad=True)
torch.sqrt(a).sum().backward()
print("trained")
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("show"), "train", SCRIPT)


def status(app: BackstepApp) -> str:
    return str(app.query_one("#status").render())


async def press(pilot, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await pilot.pause()


@pilot
async def test_step_forward_back_and_across_passes(trace: Path) -> None:
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            assert "pass 1/3" in status(app)
            assert "step 1 of 6  start of pass before SumBackward0" in status(app)
            await press(pilot, "n", "n")
            assert "step 3 of 6  step before AddmmBackward0" in status(app)
            assert app.selected == app.snapshot.stop.id  # the graph follows the cursor
            await press(pilot, "p")
            assert "step 2 of 6  step before TanhBackward0" in status(app)
            assert app.snapshot.pass_.done == 1
            await press(pilot, "]")
            assert "pass 2/3" in status(app) and "step 1 of 6" in status(app)
            await press(pilot, "p")
            assert "pass 1/3" in status(app) and "end of pass: ok" in status(app)
            await press(pilot, "[")  # the start of this pass
            assert "pass 1/3" in status(app) and "step 1 of 6" in status(app)
            await press(pilot, "[")
            assert "pass 1/3" in status(app)  # no previous pass: a note, the cursor stays


@pilot
async def test_continue_goes_to_breakpoints_both_ways(trace: Path) -> None:
    with TraceIndex(trace) as index:
        app = replay_app(index, breakpoints=[{"kind": "nonfinite"}], stop_at_pass_start=False)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await press(pilot, "c")
            text = status(app)
            assert "pass 3/3" in text and "non-finite gradient" in text
            assert "after SqrtBackward0" in text
            app.breakpoints = [{"kind": "node", "pattern": "AddmmBackward*"}]
            await press(pilot, "C")
            assert "pass 2/3" in status(app) and "breakpoint (node AddmmBackward*) before " \
                "AddmmBackward0" in status(app)
            await press(pilot, "C")
            assert "pass 1/3" in status(app)


@pilot
async def test_goto_a_pass_and_step(trace: Path) -> None:
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await press(pilot, "g")
            assert isinstance(app.screen, GotoDialog)
            await press(pilot, "2", ":", "4", "enter")
            assert "pass 2/3" in status(app) and "step 4 of 6" in status(app)
            graph = app.query_one(GraphPanel)
            assert graph is not None


@pilot
async def test_the_goto_dialog_fits_a_narrow_frame(trace: Path) -> None:
    """A served UI in a notebook's frame can be narrower than the dialog's 60 columns: it
    shrinks to the frame, its border whole."""
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(44, 24)) as pilot:
            await pilot.pause()
            await press(pilot, "g")
            assert isinstance(app.screen, GotoDialog)
            box = app.screen.query_one("#goto-box").region
            assert app.screen.region.contains_region(box), box


def glyphs_match(app: BackstepApp) -> bool:
    """Every row the graph has built shows its node's state at the snapshot shown."""
    graph = app.query_one(GraphPanel)
    view = app.snapshot.pass_
    assert view is not None and graph._rows
    return all(row.label.plain.startswith(GLYPHS[view.state(node, app.snapshot.current)][0])
               for node, row in graph._rows.items())


@pilot
async def test_the_graph_steps_back_with_the_cursor(trace: Path) -> None:
    """Back to an earlier step of the same pass in one move ([, C, g): the nodes that had run
    and have not at that step show as pending again, as live showed them there."""
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await press(pilot, "n", "n", "n", "n")
            assert app.snapshot.pass_.done == 4 and glyphs_match(app)
            await press(pilot, "left_square_bracket")  # to the start of this pass
            assert app.snapshot.pass_.number == 1 and app.snapshot.pass_.done == 0
            assert glyphs_match(app)
            app.driver.replay.jump(1, 10**6)  # its end, then back into it
            app.driver.post()
            await pilot.pause()
            assert app.snapshot.pass_.ended and glyphs_match(app)
            app.driver.replay.jump(1, 3)
            app.driver.post()
            await pilot.pause()
            assert app.snapshot.pass_.done == 2 and glyphs_match(app)


def test_parse_goto() -> None:
    assert parse_goto("3", 1) == (3, None)
    assert parse_goto("3:12", 1) == (3, 12)
    assert parse_goto(":12", 2) == (2, 12)
    assert parse_goto("x", 2) is None


def test_show_refuses_what_is_not_a_trace(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("dear diary\n")
    assert main(["show", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backstep show: ") and "not a backstep trace" in err
    assert err.count("\n") == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["show", str(empty)]) == 2
    assert "is empty" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_show_end_to_end_in_a_terminal(trace: Path, tmp_path: Path) -> None:
    from tests.pty_session import Pty

    cut = tmp_path / "cut.jsonl"
    data = trace.read_bytes()
    cut.write_bytes(data[: len(data) - 40])  # a killed run: the last line is half written
    ui = Pty(["-m", "backstep", "show", str(cut)], tmp_path)
    try:
        screen = ui.expect(r"replay.*pass 1/3.*start of pass before SumBackward0")
        assert "the last line is cut off" in screen
        maps = Path(f"/proc/{ui.pid}/maps").read_text()
        assert "libtorch" not in maps and "torch/_C" not in maps, "show loaded torch"
        ui.press("n")
        ui.expect(r"step 2 of 6  step before TanhBackward0")
        ui.press("p")
        ui.expect(r"step 1 of 6  start of pass before SumBackward0")
        ui.press("q")
        assert ui.wait() == 0
    finally:
        ui.kill()


@pilot
async def test_show_shows_the_traceback_the_script_ended_with(tmp_path: Path) -> None:
    """The recorded exit traceback is shown under the console, whether the file is indexed
    while the UI runs or before it opens (as ``--against`` opens it): the panels are set up
    once, so nothing set up again hides it."""
    failing = record(tmp_path, "boom", "import torch\n"
                     "a = torch.ones(2, requires_grad=True)\n"
                     "(a * 2).sum().backward()\n"
                     "raise ValueError('boom after backward')\n")
    for indexed_first in (False, True):
        with TraceIndex(failing, partial=True) as index:
            if indexed_first:
                index.scan()
            app = replay_app(index)
            async with app.run_test(size=(140, 42)) as pilot:
                for _ in range(100):
                    await pilot.pause(0.02)
                    if index.done:
                        break
                await pilot.pause()
                view = app.query_one("#console-traceback")
                assert view.display, indexed_first
                assert "ValueError: boom after backward" in screen_text(app), indexed_first


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_show_ended_by_sigterm_gives_the_terminal_back(trace: Path, tmp_path: Path) -> None:
    import signal

    from tests.pty_session import LEAVE_ALTERNATE_SCREEN, Pty

    ui = Pty(["-m", "backstep", "show", str(trace)], tmp_path)
    try:
        ui.expect(r"step 1 of 6  start of pass before SumBackward0")
        code, written = ui.end_by(signal.SIGTERM)
        assert code == 128 + signal.SIGTERM
        assert LEAVE_ALTERNATE_SCREEN in written  # the terminal given back, as after q
    finally:
        ui.kill()


@pilot
async def test_help_lists_the_replay_keys(trace: Path) -> None:
    from backstep.tui.panels.help import HelpScreen

    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await press(pilot, "question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = screen_text(app)
            for key, what in (("[ / ]", "the next pass"), ("c / C", "previous breakpoint"),
                              ("g", "go to a pass"), ("n / p", "across passes")):
                assert any(key in line and what in line for line in text.splitlines()), key
            await press(pilot, "escape")
            assert not isinstance(app.screen, HelpScreen)


@pilot
async def test_the_next_pass_opened_ahead_shows_what_opening_it_then_shows(trace: Path) -> None:
    """While the person reads a pass, the next one is opened ahead; ] then shows it, and it is
    exactly what ] shows without it (the leaves carried, the graph, the stop)."""
    from backstep.tui.state.replay import Replay
    from tests.tui_fixtures import panels

    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await press(pilot, "n")
            await pilot.pause(0.4)  # idle: pass 2 is opened ahead
            ahead = app.driver.replay._ahead.get(2)
            assert ahead is not None and ahead.number == 2
            await press(pilot, "right_square_bracket")
            assert app.driver.replay.timeline(2) is ahead and app.snapshot.pass_.number == 2
            shown = app.snapshot
        with TraceIndex(trace) as fresh:
            cold = Replay(fresh)
            assert cold.pass_(1)
            assert panels(shown) == panels(cold.snapshot())


@pilot
async def test_keys_that_wait_move_the_cursor_and_draw_once(trace: Path) -> None:
    """A held key: the keys already waiting move the cursor, and only where it ends up is
    opened and drawn (nothing left to catch up with when the key is let go)."""
    from textual import events

    import backstep.tui.state.replay as replay_module

    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            opened: list[int] = []
            real = replay_module.PassTimeline

            def counting(index: TraceIndex, number: int, carried: object) -> object:
                opened.append(number)
                return real(index, number, carried)

            replay_module.PassTimeline = counting  # type: ignore[misc, assignment]
            try:
                drawn = app.driver.replay._seq
                for _ in range(2):  # pass 1 -> 3 in one go: pass 2 is passed over
                    app.post_message(events.Key("right_square_bracket", None))
                app.post_message(events.Key("n", "n"))
                for _ in range(100):  # a loaded machine may take several turns to get there
                    await pilot.pause()
                    if app.snapshot.pass_ is not None and "step 2 of" in status(app):
                        break
            finally:
                replay_module.PassTimeline = real  # type: ignore[misc]
            assert app.snapshot.pass_ is not None and app.snapshot.pass_.number == 3
            assert "step 2 of" in status(app)
            assert app.driver.replay._seq - drawn == 1, "three keys, drawn once"
            assert 2 not in opened  # never opened on the way


@pytest.mark.parametrize("size", [(80, 24), (110, 32)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_the_replay_status_line_fits_and_keeps_help(trace: Path,
                                                          size: tuple[int, int]) -> None:
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            line = status(app).rstrip()
            assert len(line) <= size[0] and line.endswith("? help"), line
            assert "pass 1/3" in line and "SumBackward0" in line  # where, before the keys
            await pilot.resize_terminal(160, 48)
            await pilot.pause()
            assert "q quit" in status(app)  # room again: every key, redrawn on resize


@pilot
async def test_backstep_show_settles_its_memory_once_the_trace_is_read(trace: Path,
                                                                       monkeypatch) -> None:
    """``settle`` (gc.freeze) runs once the file is indexed and folded, and only when asked
    (backstep show's own process), never in an app that shares its process."""
    import backstep.tui.runtime.replay_driver as replay_driver

    for asked in (True, False):
        calls: list[int] = []
        monkeypatch.setattr(replay_driver, "settle", lambda calls=calls: calls.append(1))
        with TraceIndex(trace, partial=True) as index:
            app = replay_app(index, settle_memory=asked)
            async with app.run_test(size=(140, 42)) as pilot:
                for _ in range(200):
                    await pilot.pause(0.02)
                    if app.driver.replay.index.done and app.driver.replay.carries.done:
                        break
                await pilot.pause(0.2)  # the scan's next ticks: it stops, and settles
        assert calls == ([1] if asked else []), (asked, calls)


@pilot
async def test_backstep_show_collects_at_rest_after_a_move(trace: Path, monkeypatch) -> None:
    """A while after the last move, ``tidy`` collects, once a move and only in backstep show's
    own process: a run of keys starts with nothing for the collector. The driver's clock is the
    test's: its tidy timers are held here and fired when the test says a while has passed, so a
    slow key on a loaded machine cannot stand for a person reading."""
    import backstep.tui.runtime.replay_driver as replay_driver

    class Held:
        """A tidy timer the test fires; ``stop`` as a Textual timer's."""

        def __init__(self, callback) -> None:
            self.callback, self.stopped, self.fired = callback, False, False

        def stop(self) -> None:
            self.stopped = True

    def waiting(held: list[Held]) -> list[Held]:
        return [h for h in held if not h.stopped and not h.fired]

    def a_while(held: list[Held]) -> None:  # the person reads: the waiting timer fires
        for h in waiting(held):
            h.fired = True
            h.callback()

    monkeypatch.setattr(replay_driver, "settle", lambda: True)
    monkeypatch.setattr(replay_driver, "TIDY_AFTER", 3600.0)  # only this test's clock fires it
    for asked in (True, False):
        calls: list[int] = []
        held: list[Held] = []
        monkeypatch.setattr(replay_driver, "tidy", lambda calls=calls: calls.append(1))
        with TraceIndex(trace) as index:
            app = replay_app(index, settle_memory=asked)
            real_timer = app.set_timer

            def set_timer(delay, callback=None, *args, held=held, real_timer=real_timer, **kw):
                if delay != replay_driver.TIDY_AFTER:
                    return real_timer(delay, callback, *args, **kw)
                held.append(Held(callback))
                return held[-1]

            monkeypatch.setattr(app, "set_timer", set_timer)
            async with app.run_test(size=(140, 42)) as pilot:
                for _ in range(200):  # the index and the carries are built before a collection
                    if index.done and app.driver.replay.carries.done:
                        break
                    await pilot.pause(0.05)
                held.clear()  # the first snapshot's timer: the keys below start afresh
                await press(pilot, "right_square_bracket")
                await press(pilot, "n")  # keys a read apart: no collection between them
                assert calls == [] and len(waiting(held)) == (1 if asked else 0), held
                a_while(held)
                assert calls == ([1] if asked else []), (asked, calls)
                a_while(held)  # at rest: nothing new to do
                assert len(calls) <= 1 and not waiting(held)
                await press(pilot, "n")
                a_while(held)
        assert calls == ([1, 1] if asked else []), (asked, calls)
        assert len(held) == (3 if asked else 0), "one timer a move, each move's own"


def test_settle_freezes_what_is_alive() -> None:
    import gc

    from backstep.tui.runtime.settle import settle, tidy

    thresholds = gc.get_threshold()
    try:
        assert settle() and gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] >= 10_000
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert tidy() and gc.get_count()[0] < 100  # a full collection: the young are gone
