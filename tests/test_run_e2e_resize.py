"""End to end: the terminal is resized twice mid-session (TIOCSWINSZ, which sends SIGWINCH) and the
real ``backstep run`` re-flows its layout each time: 160x48 (wide) -> 80x24 (narrow, short) ->
120x40 (medium, tall), keeping the stop, the gradients and the saved tensors on screen.

Each check waits for the layout of the new size, not just for text: after a resize Textual first
paints the new size with the old size's breakpoint classes, then restyles, so a check for "the
status line is there" alone would pass on that first, wrong frame (and a test that checked right
after it would flake)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.pty_session import SCRIPT, Pty, Screen, pytestmark

__all__ = ["pytestmark"]


class ResizablePty(Pty):
    """``Pty`` at a given size, without COLUMNS / LINES in the UI's environment: they would pin
    its size (``shutil.get_terminal_size`` reads them before asking the terminal)."""

    def __init__(self, argv: list[str], cwd: Path, rows: int, cols: int) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the UI
            os.chdir(cwd)
            # a fresh environment, not os.environ.pop: under pytest, COLUMNS=80 LINES=24 can be in
            # the C environment without being in os.environ (set by putenv; curses does), where a
            # pop cannot remove them, and they pinned the UI at 80x24 through every resize
            env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
            env["TERM"] = "xterm-256color"
            os.execve(sys.executable, [sys.executable, *argv], env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.screen = Screen(rows, cols)
        self.raw = b""
        self.status: int | None = None

    def resize(self, rows: int, cols: int) -> None:
        """What a terminal emulator does when its window changes size. The screen starts blank:
        a real one keeps the old text, which could satisfy a check before the UI redrew."""
        self.pump(0.2)  # take in what was drawn for the old size
        pending = self.screen.pending
        self.screen = Screen(rows, cols)
        self.screen.pending = pending
        # the kernel sends SIGWINCH to the terminal's foreground process group: the UI
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def wait_for(self, check: Callable[[list[str]], bool], what: str,
                 timeout: float = 60.0) -> list[str]:
        """Pump until ``check(rows of the screen)`` holds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.pump(0.1)
            rows = [("".join(row)) for row in self.screen.grid]
            if check(rows):
                return rows
        raise AssertionError(f"never saw {what}; screen:\n{self.screen.text()}")


@pytest.fixture
def ui(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "example.py").write_text(SCRIPT)
    session = ResizablePty(["-m", "backstep", "run", "example.py"], tmp_path, 48, 160)
    yield session
    session.kill()


def laid_out(rows: int, cols: int, top: tuple[str, ...], absent: tuple[str, ...] = (),
             visible: tuple[str, ...] = (), status: str = "") -> Callable[[list[str]], bool]:
    """The screen of one layout: the panel titles along the top row (in order), titles that
    must not be there, text anywhere, the status line on the last row, and borders that close at
    the right edge (or at a scrollbar beside it)."""

    def check(screen: list[str]) -> bool:
        text = "\n".join(screen)
        first, last = screen[0], screen[rows - 1]
        at = [first.find(f"╭─ {title}") for title in top]
        return (len(screen) == rows and len(first) == cols
                and -1 not in at and at == sorted(at)
                # the panels reach the right edge, or stop at a vertical scrollbar (2 columns)
                and first.rstrip().endswith("╮") and cols - 2 <= len(first.rstrip()) <= cols
                and not any(f"╭─ {title}" in first for title in absent)
                and all(v in text for v in visible)
                and status in last)

    return check


def test_layout_reflows_at_each_resize(ui: ResizablePty) -> None:
    ui.expect(r"stopped: start of pass before PowBackward0")
    ui.press("n")
    ui.expect(r"before AddBackward0")
    ui.press("n")
    here = "before MulBackward0 #3"
    detail = ("Gradients · MulBackward0 #3", "grad_output[0]", "Saved tensors", "alive")

    # 160x48: three columns, Source and Leaves on the right
    ui.wait_for(laid_out(48, 160, ("Graph", "Gradients", "Source"), (),
                         (*detail, "Leaves (.grad)"), here), "the wide layout at 160x48")

    # 80x24: the graph and the node's detail side by side, Source and Leaves one scroll away;
    # the status line still names the node
    ui.resize(24, 80)
    ui.wait_for(laid_out(24, 80, ("Graph", "Gradients"), ("Source",), detail, here),
                "the narrow layout at 80x24")

    # 120x40: three columns again
    ui.resize(40, 120)
    ui.wait_for(laid_out(40, 120, ("Graph", "Gradients", "Source"), (),
                         (*detail, "Leaves (.grad)"), here), "the medium layout at 120x40")

    ui.press("n")  # still a working session, laid out for the new size
    ui.wait_for(laid_out(40, 120, ("Graph", "Gradients · AccumulateGrad #4", "Source"),
                         status="before AccumulateGrad"), "the next stop at 120x40")
    ui.press("c")
    ui.expect(r"script exited with code 0")
    ui.press("q")
    assert ui.wait() == 0
