"""SIGHUP and SIGTERM end the UI from its own event loop (the terminal restored, the command's
cleanup run), or at once where no loop runs."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from backstep.tui.runtime.hangup import HangUp


class App:
    def __init__(self) -> None:
        self.exits = 0

    def exit(self) -> None:
        self.exits += 1


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_while_the_loop_runs_asks_the_app_to_exit(sig: int) -> None:
    app = App()

    async def run() -> None:
        os.kill(os.getpid(), sig)  # delivered on this (the main) thread, inside the loop
        for _ in range(100):
            await asyncio.sleep(0.01)
            if app.exits:
                return

    with HangUp(app) as hang_up:
        asyncio.run(run())
    assert app.exits == 1
    assert hang_up.code == 128 + sig


def test_a_second_signal_keeps_the_first_code() -> None:
    app = App()

    async def run() -> None:
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.05)

    with HangUp(app) as hang_up:
        asyncio.run(run())
    assert hang_up.code == 128 + signal.SIGHUP and app.exits == 2  # exit twice is harmless


def test_a_signal_with_no_loop_running_ends_at_once() -> None:
    app = App()
    with pytest.raises(SystemExit) as ended, HangUp(app) as hang_up:
        os.kill(os.getpid(), signal.SIGTERM)
    assert ended.value.code == 128 + signal.SIGTERM
    assert app.exits == 0 and hang_up.code is None


def test_the_handlers_before_are_put_back() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)}
    with HangUp(App()):
        assert signal.getsignal(signal.SIGHUP) is not before[signal.SIGHUP]
    assert {sig: signal.getsignal(sig) for sig in before} == before
