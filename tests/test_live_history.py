"""A live session's every pass in brief (``engine/briefed``): ``run`` and ``attach()`` send the
``leaves`` / ``history`` events ``trace`` writes, for the history view (H), and the script
computes exactly what it computes without backstep."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from backstep.engine.briefed import BriefedCapture
from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.recorder import ListRecorder
from backstep.engine.session import Session
from backstep.process.launcher import debuggee_command
from backstep.traces.history_file import decode_floats
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.history import HistoryScreen
from backstep.tui.runtime.live_link import LiveLink
from tests.tui_fixtures import live_app
from tests.tui_pilot import screen_text

# six passes, a NaN fed in at pass 4; prints every gradient's bytes (the same with backstep)
SCRIPT = """\
import hashlib
import warnings
warnings.filterwarnings("ignore")  # torch's own at import: stderr kept out of stdout's lines
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x = torch.randn(16, 4)
for step in range(1, 7):
    model.zero_grad()
    inp = x.clone()
    if step == 4:
        inp[0, 0] = float("nan")
    loss = model(inp).pow(2).mean()
    loss.backward()
    digest = hashlib.sha256(b"".join(bytes(p.grad.untyped_storage())
                                     for p in model.parameters()))
    print(step, float(loss), digest.hexdigest()[:16])
"""


def _train(capture: Capture | None, passes: int = 4) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    x = torch.randn(7, 3)
    out = []
    if capture is not None:
        capture.install()
    try:
        for _ in range(passes):
            model.zero_grad()
            model(x).pow(2).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
    finally:
        if capture is not None:
            capture.uninstall()
    return out


def test_a_live_capture_sends_every_pass_in_brief_and_changes_no_gradient() -> None:
    recorder = ListRecorder()
    controller = Controller(recorder.emit, [], stop_at_pass_start=False)
    capture = BriefedCapture(recorder, controller, record=False)
    briefed = _train(capture)
    plain = _train(None)
    assert all(torch.equal(a, b) for a, b in zip(briefed, plain, strict=True))
    events = [dict(e) for e in recorder.events]
    history = [e for e in events if e["event"] == "history"]
    assert [e["n"] for e in history] == [1, 2, 3, 4]
    leaves = [e for e in events if e["event"] == "leaves"]
    assert len(leaves) == 1 and len(leaves[0]["names"]) == 4  # declared once
    assert not [e for e in events if e["event"] in ("pass_begin", "node")]  # nothing recorded
    norms = sorted(decode_floats(history[-1]["norm"]))  # the last pass's, read as H reads them
    expected = sorted(float(g.norm()) for g in plain[-4:])
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(norms, expected, strict=True))


def test_a_live_session_arms_the_briefed_capture_and_a_bare_one_does_not() -> None:
    live = Session(ListRecorder(), Controller(lambda e: None, []), record=False, source=False)
    bare = Session(ListRecorder(), record=True, source=False)
    live.arm()
    bare.arm()
    try:
        assert isinstance(live.capture, BriefedCapture)
        assert type(bare.capture) is Capture
    finally:
        for session in (bare, live):  # the last installed first: each restores what it found
            session.capture.uninstall()


def _plain_output(script: Path) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_run_shows_the_whole_run_in_its_history_view(tmp_path: Path) -> None:
    """``backstep run`` with no breakpoint and no stop at pass starts: the six passes run
    unwatched, yet H shows all six, the NaN pass marked; the script prints what plain python
    prints."""
    script = tmp_path / "six.py"
    script.write_text(textwrap.dedent(SCRIPT))
    plain = _plain_output(script)
    link = LiveLink(debuggee_command(str(script), [], source=False))
    app = live_app(link, stop_at_pass_start=False)
    printed: list[str] = []

    async def walk() -> None:
        async with app.run_test(size=(140, 42)) as p:
            async def until(ready, what: str) -> None:  # type: ignore[no-untyped-def]
                deadline = time.monotonic() + 90
                while not ready():
                    assert time.monotonic() < deadline, f"timed out waiting for {what}"
                    await p.pause(0.05)

            await until(lambda: app.snapshot.exit is not None, "the script's exit")
            await p.press("H")
            await until(lambda: isinstance(app.screen, HistoryScreen)
                        and len(app.screen.table.rows) == 6, "six passes in brief")
            await p.pause(0.1)
            text = screen_text(app)
            assert "History · 6 passes" in text and "NaN/Inf: pass 4 (1 pass)" in text
            assert "6 passes, 0 held in full" in text  # none stopped at: none recorded
            log = app.query_one(ConsolePanel).log_view
            last = plain.splitlines()[-1]  # the output travels apart from the exit event
            await until(lambda: any(last in str(line) for line in log.lines), "the output")
            printed.extend(str(line) for line in log.lines)

    try:
        asyncio.run(walk())
    finally:
        link.close()
    shown = "\n".join(printed)
    for line in plain.splitlines():  # the same losses and gradient bytes as plain python
        assert line in shown, repr(shown)
