"""Issue 45: no served UI outlives its connection or its server, and SIGTERM ends a backstep
UI promptly whatever it is doing. Before, a ``show`` started per browser connection ran on
(at 74% CPU, for half an hour) after its server was killed, and ignored SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

aiohttp = pytest.importorskip("aiohttp")

from backstep.process.served import ServedUI, ui_command  # noqa: E402

TRACE = str(Path(__file__).parent / "fixtures" / "small_trace.jsonl")
# a UI that never quits: it ignores textual-serve's "quit" and SIGTERM alike
STUBBORN = [sys.executable, "-c", "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "sys.stdout.write('__GANGLION__\\n'); sys.stdout.flush()\n"
            "while True: time.sleep(0.1)\n"]


def children(pid: int) -> list[int]:
    """Every live process below ``pid`` (or that was, and was handed to init: by the marker)."""
    rows = [line.split(None, 2) for line in subprocess.run(
        ["ps", "-e", "-o", "ppid=,pid=,stat="], capture_output=True, text=True,
        check=True).stdout.splitlines()]
    found, parents = [], {str(pid)}
    while True:
        more = [row for row in rows if row[0] in parents and row[1] not in parents
                and not row[2].startswith("Z")]
        if not more:
            return [int(p) for p in found]
        found += [row[1] for row in more]
        parents |= {row[1] for row in more}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") if os.path.exists(f"/proc/{pid}/stat") else open(os.devnull) \
            as stat:
        return ") Z" not in stat.read()


def until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


async def open_session(ui: ServedUI, drawn: bool = False) -> tuple[object, object]:
    """A browser's websocket; ``drawn``: once the UI has drawn its screen and gone quiet (an
    idle UI writes nothing, so nothing tells it its server is gone)."""
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(f"http://127.0.0.1:{ui.port}{ui.path}ws?width=80&height=24")
    if drawn:
        got = 0
        while True:
            try:
                message = await ws.receive(timeout=2.0 if got else 60.0)
            except asyncio.TimeoutError:
                break
            assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT)
            got += 1
    return session, ws


STARTED: list[int] = []  # every UI process seen: none may be left behind by a failing test


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    for pid in STARTED:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    STARTED.clear()


def ui_pid(ui: ServedUI) -> int:
    assert ui.process is not None
    assert until(lambda: children(ui.process.pid), 30), "no UI process started"
    STARTED.extend(children(ui.process.pid))
    return children(ui.process.pid)[-1]  # the UI (before issue 45 under a shell)


def test_a_served_ui_ends_with_its_server_killed(tmp_path: Path) -> None:
    ui = ServedUI(ui_command(["show", TRACE]))
    ui.start()
    loop = asyncio.new_event_loop()
    try:
        session, ws = loop.run_until_complete(open_session(ui, drawn=True))
        pid = ui_pid(ui)
        os.kill(ui.process.pid, signal.SIGKILL)  # no goodbye to anyone
        assert until(lambda: not alive(pid), 5), "the UI outlived its server"
        loop.run_until_complete(session.close())
    finally:
        ui.stop()
        loop.close()


def test_a_stuck_ui_ends_with_its_connection_and_its_server() -> None:
    ui = ServedUI(STUBBORN)
    ui.start()
    loop = asyncio.new_event_loop()
    try:
        session, ws = loop.run_until_complete(open_session(ui))
        first = ui_pid(ui)
        loop.run_until_complete(ws.close())  # the tab closed
        assert until(lambda: not alive(first), 10), "a UI outlived its connection"
        session2, ws2 = loop.run_until_complete(open_session(ui))
        second = ui_pid(ui)
        ui.stop()  # the server ends: so does every UI it runs, however stuck
        assert not alive(second), "a UI outlived its server"
        loop.run_until_complete(session.close())
        loop.run_until_complete(session2.close())
    finally:
        ui.stop()
        loop.close()


def test_sigterm_ends_a_served_ui_at_once() -> None:
    ui = ServedUI(ui_command(["show", TRACE]))
    ui.start()
    loop = asyncio.new_event_loop()
    try:
        session, ws = loop.run_until_complete(open_session(ui, drawn=True))
        pid = ui_pid(ui)
        os.kill(pid, signal.SIGTERM)
        assert until(lambda: not alive(pid), 2)
        loop.run_until_complete(session.close())
    finally:
        ui.stop()
        loop.close()


BUSY = """\
import asyncio
from backstep.tui.runtime.hangup import HangUp
class App:
    def exit(self):
        pass  # asked from its own event loop, which is too busy to get to it
async def busy():
    print("drawing", flush=True)
    while True:
        sum(range(1000))
with HangUp(App()):
    asyncio.run(busy())
"""


def test_sigterm_ends_a_ui_too_busy_to_exit(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "drawing\n"
        started = time.monotonic()
        child.send_signal(signal.SIGTERM)
        assert child.wait(15) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 10
    finally:
        child.kill()
        child.wait()
