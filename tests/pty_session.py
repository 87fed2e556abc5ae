"""A ``backstep`` command in a pseudo-terminal, for the end-to-end tests: started, driven by
keys, its screen read back (``Pty``, ``Screen``), its processes watched; and the skips that
apply wherever one runs (``pytestmark``: import it to apply them)."""

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
