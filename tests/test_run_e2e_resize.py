"""End to end: the terminal is resized mid-session (TIOCSWINSZ, which sends SIGWINCH) and the real
``backstep run`` re-flows its layout, keeping the stop, the gradients and the saved tensors on
screen at 80x24."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
from pathlib import Path

import pytest

from tests.test_run_e2e import COLS, ROWS, SCRIPT, Pty, Screen, pytestmark

__all__ = ["pytestmark"]


class ResizablePty(Pty):
    """``Pty`` without COLUMNS / LINES in the UI's environment: they would pin its size
    (``shutil.get_terminal_size`` reads them before asking the terminal)."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the UI
            os.chdir(cwd)
            os.environ["TERM"] = "xterm-256color"
            os.environ.pop("COLUMNS", None)
            os.environ.pop("LINES", None)
            os.execv(sys.executable, [sys.executable, *argv])
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.screen = Screen()
        self.raw = b""
        self.status: int | None = None

    def resize(self, rows: int, cols: int) -> None:
        """What a terminal emulator does when its window changes size."""
        self.pump(1.0)  # drain what was drawn for the old size
        old, new = self.screen, Screen(rows, cols)
        for y, row in enumerate(old.grid[:rows]):  # a terminal keeps what fits, as it was
            new.grid[y][: min(cols, old.cols)] = row[:cols]
        new.pending = old.pending
        self.screen = new
        # the kernel sends SIGWINCH to the terminal's foreground process group: the UI
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


@pytest.fixture
def ui(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "example.py").write_text(SCRIPT)
    session = ResizablePty(["-m", "backstep", "run", "example.py"], tmp_path)
    yield session
    session.kill()


def test_layout_reflows_when_the_terminal_is_resized(ui: ResizablePty) -> None:
    ui.expect(r"stopped: start of pass before PowBackward0")
    ui.press("n")
    ui.expect(r"before AddBackward0")
    ui.press("n")
    ui.expect(r"before MulBackward0")

    ui.resize(24, 80)
    screen = ui.expect(r"(?s)Gradients · MulBackward0 #3.*Saved tensors.*before MulBackward0")
    assert "grad_output[0]" in screen and "alive" in screen  # gradients and saved, no scroll
    assert len(screen.splitlines()[0]) <= 80

    ui.press("n")  # still a working session, laid out for the new size
    screen = ui.expect(r"before AccumulateGrad")
    assert "Gradients · AccumulateGrad #4" in screen
    ui.press("c")
    ui.expect(r"script exited with code 0")
    ui.press("q")
    assert ui.wait() == 0
