"""End to end: a script waits with ``--listen`` (or ``attach(listen=...)``) on loopback, the
real ``backstep connect`` attaches in a pseudo-terminal, steps, detaches; a wrong token is
refused in one line and the script never notices."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backstep.process import auth, remote
from tests.pty_session import LEAVE_ALTERNATE_SCREEN, SCRIPT, Pty

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="needs a pty"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]

ANNOUNCE = re.compile(r"backstep: (?:waiting for a UI|the script runs; a UI may attach) on "
                      r"(\S+):(\d+) \(token ([\w-]+)\)")
PLAIN = "tensor(64.) tensor(32.)\n"


class Job:
    """A listening script: stdout and stderr to files, as a batch job's log."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.out, self.err = cwd / "job.out", cwd / "job.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, *argv], cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, env={**os.environ, **(env or {})}, start_new_session=True)
        self.address, self.token = self._announced()

    def _announced(self) -> tuple[str, str]:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            match = ANNOUNCE.search(self.err.read_text())
            if match:
                return f"{match.group(1)}:{match.group(2)}", match.group(3)
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no announcement; stderr:\n{self.err.read_text()}")

    def expect_log(self, text: str, count: int = 1, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while self.err.read_text().count(text) < count:
            assert time.monotonic() < end, f"{text!r} never logged:\n{self.err.read_text()}"
            time.sleep(0.05)

    def wait(self, timeout: float = 30) -> int:
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def jobs(tmp_path: Path):
    started: list[Job | Pty] = []

    def start(kind: str, *argv: str, env: dict[str, str] | None = None) -> Job | Pty:
        item: Job | Pty = Job(list(argv), tmp_path, env) if kind == "job" else \
            Pty(list(argv), tmp_path)
        started.append(item)
        return item

    (tmp_path / "example.py").write_text(SCRIPT)
    yield start
    for item in started:
        if isinstance(item, Job):
            item.stop()
        else:
            item.kill()


def connect(jobs, job: Job, *options: str) -> Pty:
    os.environ["BACKSTEP_TOKEN"] = job.token  # the pty child inherits it; never on argv here
    try:
        return jobs("pty", "-m", "backstep", "connect", job.address, *options)
    finally:
        del os.environ["BACKSTEP_TOKEN"]


def test_connect_steps_a_listening_run_over_loopback(jobs) -> None:
    job = jobs("job", "-m", "backstep", "run", "--listen", "127.0.0.1:0", "example.py")
    assert job.address.startswith("127.0.0.1:")
    time.sleep(0.2)
    assert job.out.read_text() == ""  # it waits for the first UI before the script runs

    wrong = subprocess.run([sys.executable, "-m", "backstep", "connect", job.address,
                            "--token", "not-the-token", "--timeout", "20"],
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert wrong.returncode == 2
    assert wrong.stdout == ""
    assert wrong.stderr.count("\n") == 1 and "wrong token" in wrong.stderr, wrong.stderr
    assert job.process.poll() is None

    ui = connect(jobs, job)
    ui.expect(r"stopped: start of pass before PowBackward0")
    ui.press("n")
    ui.expect(r"before AddBackward0")
    ui.press("c")
    ui.expect(r"script exited with code 0")
    ui.expect(r"tensor\(64\.\) tensor\(32\.\)")  # a copy of its print, in the console
    assert job.wait() == 0
    ui.press("q")
    assert ui.wait() == 0
    assert job.out.read_text() == PLAIN  # the job's own output, untouched
    log = job.err.read_text()
    assert "refused a UI from 127.0.0.1" in log and "wrong token" in log
    assert "not-the-token" not in log


def test_a_ui_detaches_and_another_attaches_later(jobs, tmp_path: Path) -> None:
    (tmp_path / "twice.py").write_text(textwrap.dedent("""\
        import os, time, torch
        x = torch.tensor(2.0, requires_grad=True)
        for i in range(2):
            while not os.path.exists(f"go{i}"):
                time.sleep(0.02)
            (x * x * (i + 1)).backward()
            print("pass", i, x.grad.item(), flush=True)
        """))
    job = jobs("job", "-m", "backstep", "run", "--listen", "0", "--no-wait", "twice.py")
    first = connect(jobs, job)
    job.expect_log("a UI attached from")
    (tmp_path / "go0").touch()
    first.expect(r"stopped: start of pass before MulBackward0")
    host, port = job.address.rsplit(":", 1)
    with pytest.raises(auth.HandshakeError, match="another UI is attached"):
        remote.connect((host, int(port)), job.token)
    first.press("q")  # detach while stopped: the script is released and runs on
    assert first.wait() == 0
    deadline = time.monotonic() + 30
    while "pass 0" not in job.out.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.out.read_text() == "pass 0 4.0\n"

    second = connect(jobs, job)
    job.expect_log("a UI attached from", count=2)
    (tmp_path / "go1").touch()
    second.expect(r"stopped: start of pass before MulBackward0")
    second.press("c")
    second.expect(r"script exited with code 0")
    assert job.wait() == 0
    second.press("q")
    assert second.wait() == 0
    assert job.out.read_text() == "pass 0 4.0\npass 1 12.0\n"


def test_a_connected_ui_ended_by_sigterm_detaches_and_gives_the_terminal_back(jobs) -> None:
    job = jobs("job", "-m", "backstep", "run", "--listen", "127.0.0.1:0", "example.py")
    ui = connect(jobs, job)
    ui.expect(r"stopped: start of pass before PowBackward0")
    code, written = ui.end_by(signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert LEAVE_ALTERNATE_SCREEN in written  # the terminal given back, as after q
    assert job.wait() == 0  # released, as when a UI detaches
    assert job.out.read_text() == PLAIN


def test_attach_listen_waits_for_a_ui_and_survives_one_that_vanishes(jobs, tmp_path) -> None:
    (tmp_path / "attached.py").write_text("import backstep\nbackstep.attach()\n" + SCRIPT)
    job = jobs("job", "attached.py", env={"BACKSTEP_LISTEN": "127.0.0.1:0"})
    time.sleep(0.2)
    assert job.process.poll() is None and job.out.read_text() == ""  # attach() waits
    host, port = job.address.rsplit(":", 1)
    ui = remote.connect((host, int(port)), job.token)
    assert ui.receive()["event"] == "session"
    ui.send({"cmd": "start", "breakpoints": [], "stop_at_pass_start": True})
    while (event := ui.receive()) is not None and event["event"] != "stopped":
        pass
    assert event is not None and event["name"] == "PowBackward0"
    ui.close()  # the UI vanishes mid-stop (no detach): the script is released, as with a local UI
    assert job.wait() == 0
    assert job.out.read_text() == PLAIN
    assert "a UI attached from 127.0.0.1" in job.err.read_text()


def test_a_listening_job_with_no_ui_behaves_as_python(jobs, tmp_path: Path) -> None:
    (tmp_path / "fails.py").write_text("import sys\n" + SCRIPT +
                                       "print('to stderr', file=sys.stderr)\nsys.exit(3)\n")
    job = jobs("job", "-m", "backstep", "run", "--listen", "0", "--no-wait", "fails.py")
    assert job.wait() == 3
    assert job.out.read_text() == PLAIN
    announce, rest = job.err.read_text().split("\n", 1)
    assert ANNOUNCE.match(announce) and "waiting" not in announce  # --no-wait: it does not
    assert rest.endswith("to stderr\n") and "backstep" not in rest  # torch's own warnings aside
