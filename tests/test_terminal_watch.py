"""A terminal that closes without a SIGHUP (a torchrun rank's UI has no controlling terminal)."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from backstep.tui.runtime.terminal_watch import terminal_gone


def test_a_live_pty_is_not_gone_and_a_closed_one_is() -> None:
    master, slave = pty.openpty()
    try:
        assert not terminal_gone(slave)
        os.close(master)
        assert terminal_gone(slave)
    finally:
        os.close(slave)


def test_what_is_not_a_terminal_is_never_gone() -> None:
    read, write = os.pipe()
    try:
        assert not terminal_gone(read)
    finally:
        os.close(read)
        os.close(write)


def test_a_gone_terminal_ends_the_process_after_its_cleanup(tmp_path: Path) -> None:
    """In a child: nothing happens while the pty lives; once its master closes, the cleanup runs
    and the process exits 129, as a hangup would."""
    code = textwrap.dedent(f"""\
        import os, pty, sys
        from backstep.tui.runtime.terminal_watch import end_if_gone
        master, slave = pty.openpty()
        end_if_gone(slave, lambda: print("too early"))
        os.close(master)
        end_if_gone(slave, lambda: open({str(tmp_path / "cleaned")!r}, "w").close())
        print("not reached")
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 128 + signal.SIGHUP
    assert done.stdout == ""
    assert (tmp_path / "cleaned").exists()
