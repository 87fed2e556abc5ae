"""The script outlives its UI: after ``kill -9`` of ``backstep run``'s UI, the paused pass
completes, every later write reaches the terminal, and the script ends as it would have."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.pty_session import Pty, children_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="needs a pty and PR_SET_CHILD_SUBREAPER")

PR_SET_CHILD_SUBREAPER = 36

SCRIPT = textwrap.dedent(
    """\
    import os, sys, torch
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    print("before", flush=True)
    (x * x).sum().backward()
    for i in range(3000):  # far more than a pipe holds
        print("after", i, x.grad.tolist())
    print("to stderr", file=sys.stderr)
    os.write(1, b"c-level write\\n")
    print("the end")
    """
)


@pytest.fixture
def subreaper():
    """Orphans of the killed UI become this process's children, so their status is seen."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip("cannot become a subreaper")
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def test_kill_9_of_the_ui_mid_stop_lets_the_script_finish(tmp_path: Path, subreaper) -> None:
    (tmp_path / "outlive.py").write_text(SCRIPT)
    temp = tmp_path / "tmp"
    temp.mkdir()
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(temp)
    try:
        ui = Pty(["-m", "backstep", "run", "outlive.py"], tmp_path)
    finally:
        if saved is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = saved
    try:
        ui.expect(r"stopped: start of pass", timeout=90)
        (debuggee,) = children_of(ui.pid)
        os.kill(ui.pid, signal.SIGKILL)
        os.waitpid(ui.pid, 0)
        ui.status = -9
        status = None
        end = time.monotonic() + 60
        while status is None and time.monotonic() < end:
            ui.pump(0.1)
            pid, raw = os.waitpid(debuggee, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(raw)
        ui.pump(0.5)
        assert status == 0, ui.raw.decode(errors="replace")[-2000:]
        out = ui.raw.decode(errors="replace")
        assert "after 2999 [2.0, 4.0]" in out and "the end" in out
        assert "to stderr" in out and "c-level write" in out
        assert "BrokenPipe" not in out and "Traceback" not in out
        assert list(temp.iterdir()) == [], "a temp directory was left behind"
    finally:
        ui.kill()


def test_a_long_tmpdir_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    import tempfile

    from backstep.process import transport

    long = tmp_path / ("d" * 110)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    listener = transport.Listener()  # too long for AF_UNIX there: it falls back to /tmp
    try:
        assert os.path.exists(listener.path) and len(os.fsencode(listener.path)) <= 100
    finally:
        listener.close()
    assert list(long.iterdir()) == [] and not os.path.exists(listener.directory)
