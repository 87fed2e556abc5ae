"""``backstep.attach()`` and ``breakpoint()`` from inside a running script, in a real
pseudo-terminal: the UI opens at the first node, hands the terminal back on quit, and the script
carries on with correct gradients; without a terminal attach() never hangs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.pty_session import Pty

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")

SCRIPT = textwrap.dedent("""\
    import torch
    import backstep
    x = torch.tensor(2.0, requires_grad=True)
    y = torch.tensor(3.0, requires_grad=True)
    print("training starts")
    {arm}
    out = (x * y + x) ** 2
    out.backward()
    print("final grads", x.grad.item(), y.grad.item())
""")


def run_in_pty(tmp_path: Path, arm: str, env: dict[str, str] | None = None) -> Pty:
    (tmp_path / "train.py").write_text(SCRIPT.format(arm=arm))
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        return Pty(["train.py"], tmp_path)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize(
    "arm, env",
    [("backstep.attach()", {}), ("breakpoint()", {"PYTHONBREAKPOINT": "backstep.attach"})],
    ids=["attach", "breakpoint"],
)
def test_attach_stops_finishes_and_hands_back(tmp_path: Path, arm: str, env: dict) -> None:
    session = run_in_pty(tmp_path, arm, env)
    try:
        screen = session.expect(r"before PowBackward0", timeout=90)
        assert "training starts" in screen  # the script's output before the UI came up
        session.press("f")
        # the script's own output after the pass, with plain PyTorch's gradients: in the console
        # panel if the UI is still up when it prints, else on the terminal it was handed back
        session.expect(r"final grads 64\.0 32\.0", timeout=30)
        session.press("q")
        assert session.wait(60) == 0
    finally:
        session.kill()


def test_no_terminal_returns_promptly(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT.format(arm="backstep.attach()"))
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0
    assert proc.stdout == "training starts\nfinal grads 64.0 32.0\n"
    assert "no terminal" in proc.stderr and proc.stderr.count("backstep:") == 1


def test_trace_instead_of_ui(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT.format(arm="backstep.attach(trace='run.jsonl')"))
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "final grads 64.0 32.0" in proc.stdout
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    assert '"event":"session"' in lines[0] and any('"PowBackward0"' in line for line in lines)


def quit_and_expect(session: Pty, pattern: bytes, timeout: float = 60) -> None:
    """Press q until ``pattern`` appears: a key typed while the UI is still switching the
    terminal into raw mode can be lost (seen only on a heavily loaded machine)."""
    import re

    mark = len(session.raw)
    deadline = time.monotonic() + timeout
    next_press = 0.0
    while not re.search(pattern, session.raw[mark:]):
        assert time.monotonic() < deadline, (
            f"{pattern!r} never appeared; output since: {session.raw[mark:][-800:]!r}")
        if time.monotonic() >= next_press:
            session.press("q")
            next_press = time.monotonic() + 10
        session.pump(0.2)


def test_ui_dying_never_blocks_the_script(tmp_path: Path) -> None:
    import signal

    from tests.pty_session import children_of

    session = run_in_pty(tmp_path, "backstep.attach()")
    try:
        session.expect(r"before PowBackward0", timeout=90)
        (ui,) = children_of(session.pid)
        os.kill(ui, signal.SIGKILL)  # the UI crashes while the script is paused in a hook
        assert session.wait(60) == 0
        session.pump(0.5)
        assert "final grads 64.0 32.0" in session.raw.decode(errors="replace")
    finally:
        session.kill()


def test_attach_twice_is_harmless_and_reopens_after_quit(tmp_path: Path) -> None:
    body = textwrap.dedent("""\
        import torch
        import backstep
        w = torch.ones(2, requires_grad=True)
        for step in range(2):
            backstep.attach()
            backstep.attach()
            (w * w).sum().backward()
            print("step", step, w.grad.tolist())
    """)
    (tmp_path / "loop.py").write_text(body)
    session = Pty(["loop.py"], tmp_path)
    try:
        session.expect(r"before SumBackward0", timeout=90)
        quit_and_expect(session, rb"step 0 \[2\.0, 2\.0\]")
        mark = len(session.raw)
        deadline = time.monotonic() + 60
        while b"before SumBackward0" not in session.raw[mark:]:  # the second attach reopens it
            assert time.monotonic() < deadline, "the UI never opened again"
            session.pump(0.2)
        quit_and_expect(session, rb"step 1 \[4\.0, 4\.0\]")
        assert session.wait(60) == 0
    finally:
        session.kill()


STDIN_SCRIPT = textwrap.dedent("""\
    import torch
    import backstep
    backstep.attach()
    print("hello", repr(input("name? ")), flush=True)
    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()
    print("waiting", flush=True)
    print("again", repr(input("again? ")), "grad", x.grad.item(), flush=True)
""")


def test_stdin_goes_to_the_ui_while_it_is_up_and_to_the_script_after(tmp_path: Path) -> None:
    (tmp_path / "ask.py").write_text(STDIN_SCRIPT)
    session = Pty(["ask.py"], tmp_path)
    try:
        session.expect(r"the script reads stdin", timeout=90)
        session.press("Ada\r")  # into the console's input line, not the terminal
        session.expect(r"hello 'Ada'", timeout=30)
        session.expect(r"stopped: start of pass", timeout=30)
        session.press("c")
        session.expect(r"the script reads stdin", timeout=30)
        session.press("\x1b")  # leave the line open, go back to the graph
        session.pump(1.0)
        session.press("q")  # the UI goes; the waiting input() now reads the terminal
        end = time.monotonic() + 30
        while b"\x1b[?1049l" not in session.raw and time.monotonic() < end:
            session.pump(0.1)  # until the UI has left the alternate screen
        session.pump(0.5)
        session.press("Bob\r")
        assert session.wait(60) == 0
        session.pump(0.3)
        assert "again 'Bob' grad 4.0" in session.raw.decode(errors="replace")
    finally:
        session.kill()


FORK_AFTER_ATTACH = textwrap.dedent("""\
    import os, time
    import torch
    import backstep
    backstep.attach()
    pid = os.fork()
    if pid == 0:  # a child on the console pipes, still writing after the UI has gone
        time.sleep(3)
        for i in range(2000):
            print("child late", i)
        os._exit(0)
    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()
    _, status = os.waitpid(pid, 0)
    print("child status", os.waitstatus_to_exitcode(status))
""")


def test_a_fork_keeps_writing_after_the_ui_is_gone(tmp_path: Path) -> None:
    (tmp_path / "forked.py").write_text(FORK_AFTER_ATTACH)
    session = Pty(["forked.py"], tmp_path)
    try:
        session.expect(r"stopped: start of pass", timeout=90)
        session.press("q")
        assert session.wait(60) == 0
        session.pump(0.5)
        tail = session.raw.decode(errors="replace")
        assert "child late 1999" in tail and "child status 0" in tail
    finally:
        session.kill()


def test_what_the_script_printed_while_the_ui_was_up_stays_on_the_terminal(tmp_path: Path) -> None:
    """Issue 44: after q the script's output from while the UI was up was only in the Console
    panel, gone with the UI's screen; ``backstep run`` leaves it on the terminal, attach() too."""
    from tests.pty_session import LEAVE_ALTERNATE_SCREEN

    session = run_in_pty(tmp_path, "backstep.attach()")
    try:
        session.expect(r"before PowBackward0", timeout=90)
        session.press("f")
        session.expect(r"final grads 64\.0 32\.0", timeout=30)  # in the console, the UI still up
        session.press("q")
        assert session.wait(60) == 0
        session.pump(0.5)
        after = session.raw.rsplit(LEAVE_ALTERNATE_SCREEN, 1)[-1].decode(errors="replace")
        assert "final grads 64.0 32.0" in after, after
    finally:
        session.kill()
