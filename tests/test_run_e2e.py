"""End to end: the real ``backstep run`` in a pseudo-terminal, driven by keys, read off the screen."""

from __future__ import annotations

import importlib.util
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="needs a pty"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]

ROWS, COLS = 42, 140
TOKENS = re.compile(rb"\x1b\[([0-?]*)([ -/]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.|"
                    rb"[\r\n\b]|[^\x1b\r\n\b]+")

COMPLETE_ESCAPE = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|"
                             rb"\x1b[^\[\]]")

SCRIPT = textwrap.dedent(
    """\
    import torch

    x = torch.tensor(2.0, requires_grad=True)
    y = torch.tensor(3.0, requires_grad=True)
    out = (x*y + x)**2
    out.backward()
    print(x.grad, y.grad)
    """
)


def incomplete_utf8_tail(data: bytes) -> int:
    """How many bytes at the end start a UTF-8 character that is not complete yet."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue
        need = 4 if byte >= 0xF0 else 3 if byte >= 0xE0 else 2 if byte >= 0xC0 else 1
        return back if need > back else 0
    return 0


class Screen:
    """Just enough of a terminal for Textual's output: cursor moves, text, SGR ignored."""

    def __init__(self, rows: int = ROWS, cols: int = COLS) -> None:
        self.rows, self.cols = rows, cols
        self.grid = [[" "] * cols for _ in range(rows)]
        self.y = self.x = 0
        self.pending = b""

    def feed(self, data: bytes) -> None:
        data = self.pending + data
        self.pending = b""
        held = b""  # an escape sequence cut by the read: it completes with the next one
        esc = data.rfind(b"\x1b")
        if esc != -1 and len(data) - esc < 64 and not COMPLETE_ESCAPE.match(data, esc):
            data, held = data[:esc], data[esc:]
        pos = 0
        for match in TOKENS.finditer(data):
            pos = match.end()
            token = match.group(0)
            if token.startswith(b"\x1b["):
                if match.group(3) == b"H":
                    parts = [int(p or 1) for p in match.group(1).split(b";")] if match.group(1) else [1, 1]
                    self.y = min(self.rows - 1, parts[0] - 1)
                    self.x = min(self.cols - 1, (parts[1] if len(parts) > 1 else 1) - 1)
            elif token == b"\r":
                self.x = 0
            elif token == b"\n":
                self.y = min(self.rows - 1, self.y + 1)
            elif token.startswith(b"\x1b") or token == b"\b":
                continue
            else:
                if match.end() == len(data):
                    cut = incomplete_utf8_tail(token)
                    if cut:
                        self.pending, token = token[-cut:], token[:-cut]
                        pos = len(data)
                for ch in token.decode("utf-8", errors="replace"):
                    if self.x < self.cols:
                        self.grid[self.y][self.x] = ch
                    self.x += 1
        self.pending = (self.pending or data[pos:]) + held

    def text(self) -> str:
        return "\n".join("".join(row).rstrip() for row in self.grid)


LEAVE_ALTERNATE_SCREEN = b"\x1b[?1049l"  # what Textual writes as it gives the terminal back


class Pty:
    """``backstep run`` on a 140x42 pseudo-terminal."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        import fcntl
        import pty
        import struct
        import termios

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the UI
            os.chdir(cwd)
            os.environ["TERM"] = "xterm-256color"
            os.environ["COLUMNS"], os.environ["LINES"] = str(COLS), str(ROWS)
            os.execv(sys.executable, [sys.executable, *argv])
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.screen = Screen()
        self.raw = b""
        self.status: int | None = None

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.raw += data
                self.screen.feed(data)

    def expect(self, pattern: str, timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.pump(0.1)
            text = self.screen.text()
            if re.search(pattern, text):
                return text
        raise AssertionError(f"{pattern!r} never appeared; screen:\n{self.screen.text()}")

    def press(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 20.0) -> int | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
            self.pump(0.1)
        return None

    def end_by(self, sig: int) -> tuple[int | None, bytes]:
        """Send ``sig`` to the UI and wait for it to end: its exit code (None: it never
        ended), and what it wrote from the signal on."""
        shown = len(self.raw)
        os.kill(self.pid, sig)
        code = self.wait()
        self.pump(0.2)
        return code, self.raw[shown:]

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    return [int(a) for a, b in (line.split() for line in out.splitlines()) if int(b) == pid]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


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
    assert ui.wait() is not None
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
    ui.expect(r"script exited with code 0")
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
    "from backstep.tui.live_app import BackstepApp\n"
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
