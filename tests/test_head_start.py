"""``backstep run`` starts the script before the UI is up (issue 30: the first stop came half a
second of Textual's start-up late), and the console still shows everything it printed, in order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from backstep.commands import run as run_command
from backstep.process.head_start import HeadStart
from backstep.process.launcher import debuggee_command

PRINTS = (
    "import sys\n"
    "for i in range(200):\n"
    "    print(f'out {i}', flush=True)\n"
    "    print(f'err {i}', file=sys.stderr, flush=True)\n"
)


def _wait_for(ready, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_what_the_script_prints_before_the_console_is_up_reaches_it_in_order(
    tmp_path: Path,
) -> None:
    script = tmp_path / "prints.py"
    script.write_text(PRINTS)
    start = HeadStart(debuggee_command(str(script), []), {"cmd": "start"})
    start.start()
    try:
        assert start.connected.wait(60) and start.channel is not None
        _wait_for(lambda: start.debuggee.poll() is not None, "the script to end")
        start.debuggee.wait_output(5.0)  # all of it printed, and held: no console yet
        shown: list[tuple[str, str]] = []
        start.attach(lambda text, stream: shown.append((text, stream)))
    finally:
        start.close()
    assert start.debuggee.poll() == 0
    for stream, word in (("stdout", "out"), ("stderr", "err")):
        text = "".join(t for t, s in shown if s == stream)
        assert text == "".join(f"{word} {i}\n" for i in range(200))


def test_the_script_runs_before_the_ui_is_up(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's ``run`` (Textual starting) sees the script already running: here it waits for
    the file the script writes and never draws anything. Before the head start, the debuggee
    only started once the app was mounted, and this wait timed out."""
    from backstep.tui.app import BackstepApp

    marker = tmp_path / "started"
    script = tmp_path / "writes.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    seen: list[bool] = []

    def run(self: BackstepApp) -> int:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(marker.exists())
        return 0

    monkeypatch.setattr(BackstepApp, "run", run)
    monkeypatch.setattr(run_command, "torch_problem", lambda: None)
    monkeypatch.chdir(tmp_path)
    code = run_command.launch(str(script), [], stop_at_pass_start=True)
    assert seen == [True]
    assert code == 0
