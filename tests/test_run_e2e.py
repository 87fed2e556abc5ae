"""End to end: the real ``backstep run`` in a pseudo-terminal, driven by keys, read off the screen."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.pty_session import (
    LEAVE_ALTERNATE_SCREEN,
    ROWS,
    SCRIPT,
    Pty,
    alive,
    children_of,
    pytestmark,  # noqa: F401 - the same skips
)


@pytest.fixture
def run_ui(tmp_path: Path):
    sessions: list[Pty] = []

    def start(*args: str) -> Pty:
        (tmp_path / "example.py").write_text(SCRIPT)
        session = Pty(["-m", "backstep", "run", *args], tmp_path)
        sessions.append(session)
        return session

    yield start
    for session in sessions:
        session.kill()


def row_with(text: str, *words: str) -> str | None:
    for line in text.splitlines():
        if all(re.search(w, line) for w in words):
            return line
    return None


def test_steps_through_the_example_and_quits_cleanly(run_ui) -> None:
    ui = run_ui("example.py")
    screen = ui.expect(r"stopped: start of pass before PowBackward0")
    assert "➜ PowBackward0" in screen
    debuggees = children_of(ui.pid)
    assert len(debuggees) == 1
    maps = Path(f"/proc/{ui.pid}/maps").read_text()
    assert "libtorch" not in maps and "torch/_C" not in maps, "the UI process loaded torch"

    ui.press("n")
    ui.expect(r"before AddBackward0")
    ui.press("n")
    screen = ui.expect(r"before MulBackward0")
    assert "➜ MulBackward0" in screen and "✓ AddBackward0" in screen

    ui.press("c")
    screen = ui.expect(r"script exited with code 0")
    screen = ui.expect(r"tensor\(64\.\) tensor\(32\.\)")  # the script's own print, in the console
    screen = ui.expect(r"│ x\b[^\n]*\b64\b")  # the leaves' rows may be drawn a frame later
    assert row_with(screen, r"│ x\b", r"\b64\b"), screen
    assert row_with(screen, r"│ y\b", r"\b32\b"), screen

    ui.press("q")
    assert ui.wait() == 0
    time.sleep(0.2)
    assert not any(alive(pid) for pid in debuggees), "the debuggee outlived the UI"


def test_quit_in_the_middle_of_a_pass_leaves_no_orphan(run_ui) -> None:
    ui = run_ui("example.py")
    ui.expect(r"before PowBackward0")
    debuggees = children_of(ui.pid)
    ui.press("q")
    # the README's `q`: a script ended while it runs leaves with 143, as a shell reports SIGTERM
    assert ui.wait() == 128 + signal.SIGTERM
    time.sleep(0.2)
    assert debuggees and not any(alive(pid) for pid in debuggees)


def test_missing_script_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "backstep", "run", "nope.py", "--flag"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "can't open file" in lines[0] and "nope.py" in lines[0]


LOOP = textwrap.dedent(
    """\
    import sys, time
    import torch

    w = torch.tensor(1.0, requires_grad=True)
    for i in range(150):
        (w * 3).backward()
        time.sleep(0.02)
    print("loop done", sys.argv[1:])
    """
)


def test_ctrl_c_stops_a_free_running_script_and_argv_reaches_it(run_ui, tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    ui = run_ui("--no-stop-at-start", "loop.py", "--lr", "3")
    ui.expect(r"running", timeout=60)
    time.sleep(1.0)
    ui.press("\x03")  # ctrl+c
    screen = ui.expect(r"stopped: interrupted before \w+", timeout=30)
    assert "pass" in screen
    ui.press("f")  # finish this pass; the rest runs free again
    ui.press("c")
    ui.expect(r"loop done \['--lr', '3'\]", timeout=60)
    # issue 44: the passes that ran unwatched after c are counted, not left out of sight
    ui.expect(r"script exited with code 0 · 150 passes ran")
    ui.press("]")  # nothing after the last pass held: it says so
    ui.expect(r"is the last pass held; 150 passes", timeout=10)
    ui.press("q")
    assert ui.wait() == 0


def test_hangup_ends_the_ui_and_the_debuggee(run_ui) -> None:
    ui = run_ui("example.py")
    ui.expect(r"before PowBackward0")
    debuggees = children_of(ui.pid)
    code, written = ui.end_by(signal.SIGHUP)
    assert code == 128 + signal.SIGHUP
    assert LEAVE_ALTERNATE_SCREEN in written  # the terminal given back, as after q
    assert debuggees and not any(alive(pid) for pid in debuggees)


def test_nonfinite_breakpoint_stops_where_the_nan_is_born(tmp_path: Path) -> None:
    (tmp_path / "nan.py").write_text(
        "import torch\n"
        "x = torch.tensor([-1.0, 4.0], requires_grad=True)\n"
        "y = torch.where(x > 0, x.sqrt(), torch.zeros_like(x))\n"
        "y.sum().backward()\n"
        "print('grad', x.grad)\n"
    )
    ui = Pty(["-m", "backstep", "run", "--no-stop-at-start", "--break", "nonfinite", "nan.py"],
             tmp_path)
    try:
        screen = ui.expect(r"non-finite gradient.* after SqrtBackward0", timeout=90)
        assert "Gradients · SqrtBackward0" in screen
        assert "NaN/Inf gradient is born at SqrtBackward0" in ui.expect(r"born at SqrtBackward0")
        ui.press("c")
        ui.expect(r"script exited with code 0")
        ui.press("q")
        assert ui.wait() == 0
    finally:
        ui.kill()


def test_a_script_killed_by_a_signal_exits_as_a_shell_reports_it(tmp_path: Path) -> None:
    (tmp_path / "killed.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    ui = Pty(["-m", "backstep", "run", "killed.py"], tmp_path)
    try:
        ui.expect(r"the debuggee died \(signal 9\)", timeout=60)
        ui.press("q")
        assert ui.wait() == 128 + signal.SIGKILL
    finally:
        ui.kill()


ASK = textwrap.dedent(
    """\
    import torch
    name = input("name? ")
    print("hello", repr(name))
    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()
    try:
        input("more? ")
    except EOFError:
        print("EOF reached")
    print("grad", x.grad.item())
    """
)


def test_input_reads_what_is_typed_in_the_console_and_ctrl_d_is_eof(tmp_path: Path) -> None:
    (tmp_path / "ask.py").write_text(ASK)
    ui = Pty(["-m", "backstep", "run", "ask.py"], tmp_path)
    try:
        ui.expect(r"the script reads stdin", timeout=90)
        ui.press("Ada Lovelace\r")
        ui.expect(r"hello 'Ada Lovelace'", timeout=30)
        ui.expect(r"stopped: start of pass", timeout=30)
        ui.press("c")
        ui.expect(r"the script reads stdin", timeout=30)
        ui.press("\x04")  # ctrl+d
        ui.expect(r"script exited with code 0", timeout=30)
        end = time.monotonic() + 30
        while b"grad 4.0" not in ui.raw and time.monotonic() < end:
            ui.pump(0.1)
        # the raw output: the console redraws only the cells that change on the "more? " line
        assert b"EOF reached" in ui.raw and b"grad 4.0" in ui.raw
        ui.press("q")
        assert ui.wait() == 0
    finally:
        ui.kill()


ENDS_WITH_3 = textwrap.dedent(
    """\
    import sys
    import torch

    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()
    for i in range(60):
        print("line", i)
    sys.exit(3)
    """
)


def test_q_after_the_end_exits_with_the_scripts_code_and_leaves_its_output(tmp_path: Path) -> None:
    (tmp_path / "three.py").write_text(ENDS_WITH_3)
    ui = Pty(["-m", "backstep", "run", "three.py"], tmp_path)
    try:
        ui.expect(r"stopped: start of pass", timeout=90)
        ui.press("c")
        screen = ui.expect(r"script exited with code 3", timeout=60)
        status = row_with(screen, r"script exited with code 3")
        assert status is not None and "q quit" in status
        assert "n step" not in status and "c continue" not in status, status
        ui.expect(r"line 59")
        ui.press("q")
        assert ui.wait() == 3
        ui.pump(0.5)
        after = ui.raw[ui.raw.rindex(LEAVE_ALTERNATE_SCREEN):].decode(errors="replace")
        after = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]", "", after)  # the modes Textual resets
        printed = [line for line in re.split(r"\r?\n", after) if line.startswith("line ")]
        # the last screenful: the 42-row terminal keeps a row for the prompt
        assert printed == [f"line {i}" for i in range(60 - (ROWS - 1), 60)], after
    finally:
        ui.kill()


CRASHING_UI = (
    "import sys\n"
    "from backstep.tui.app import BackstepApp\n"
    "def broken(self):\n"
    "    raise RuntimeError('a bug in the UI')\n"
    "BackstepApp.action_step = broken\n"
    "from backstep.cli import main\n"
    "sys.exit(main(['run', 'example.py']))\n"
)


def test_a_crash_of_the_ui_is_not_reported_as_success(tmp_path: Path) -> None:
    """Textual prints the traceback and returns None from run(): the command must not then
    report the aborted debuggee's status (0) as if the script had finished."""
    (tmp_path / "example.py").write_text(SCRIPT)
    ui = Pty(["-c", CRASHING_UI], tmp_path)
    try:
        ui.expect(r"before PowBackward0")
        ui.press("n")
        code = ui.wait(30)
        assert code == 1, code
        assert b"a bug in the UI" in ui.raw
    finally:
        ui.kill()
