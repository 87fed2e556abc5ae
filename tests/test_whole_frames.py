"""Every frame reaches the terminal whole (``tui.runtime.whole_writes``).

Under ``PYTHONUNBUFFERED=1`` Textual's frames went through a stream that drops what a short
write left over: on a busy terminal the rest of a frame was lost, and the status line of a stop
kept saying "running…" (found with py-spy attached to the UI)."""

from __future__ import annotations

import asyncio
import os
import re
import select
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from backstep.tui.runtime.whole_writes import WholeWrites, driver_class, whole
from tests.pty_session import SCRIPT, Pty, pytestmark  # noqa: F401 - same skips
from tests.tui_fixtures import live_app

CUT_ESCAPE = re.compile(rb"\x1b\[[0-?]*[ -/]*(?=\x1b)")  # a CSI sequence cut by the next one


def _read_all(fd: int, until: int, pause: float = 0.0) -> bytes:
    """Read ``fd`` until ``until`` bytes came, its end, or 5 s of silence."""
    data = b""
    while len(data) < until:
        if not select.select([fd], [], [], 5.0)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        if pause:
            time.sleep(pause)
    return data


def test_a_short_write_is_written_again(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    real_write = os.write
    calls: list[int] = []
    full = {"once": True}

    def short(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if full["once"] and len(calls) == 3:  # a non-blocking terminal that is full, once
            full["once"] = False
            raise BlockingIOError
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(os, "write", short)
    stream = WholeWrites(write)
    text = "frame ┃ ✓ " * 20
    assert stream.write(text) == len(text)
    monkeypatch.setattr(os, "write", real_write)
    os.close(write)
    assert _read_all(read, 10**6) == text.encode()
    os.close(read)
    assert len(calls) > 20


def test_a_full_non_blocking_terminal_loses_nothing() -> None:
    """1 MB through a pty set non-blocking, read slowly: the writer waits for room."""
    import pty

    master, slave = pty.openpty()
    import tty

    tty.setraw(slave)
    os.set_blocking(slave, False)
    stream = WholeWrites(slave)
    text = "".join(f"\x1b[{i % 40 + 1};1H row {i} ┃" for i in range(40_000))
    writer = threading.Thread(target=stream.write, args=(text,))
    writer.start()
    try:
        got = _read_all(master, len(text.encode()), pause=0.0005)
    finally:
        writer.join(10)
        os.close(slave)
        os.close(master)
    assert not writer.is_alive()
    assert got == text.encode()


def test_whole_keeps_the_stream_s_encoding_and_leaves_a_stand_in() -> None:
    read, write = os.pipe()
    try:
        with open(write, "w", encoding="latin-1", errors="replace", closefd=False) as raw:
            wrapped = whole(raw)
            assert isinstance(wrapped, WholeWrites) and wrapped.fileno() == write
            assert (wrapped.encoding, wrapped.errors) == ("latin-1", "replace")
            assert whole(wrapped) is wrapped
        wrapped.write("é✓")
        assert os.read(read, 10) == "é?".encode("latin-1")
    finally:
        os.close(read)
        os.close(write)
    stand_in = object()
    assert whole(stand_in) is stand_in


def test_windows_keeps_its_console_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "name", "nt")
    assert whole(sys.__stderr__) is sys.__stderr__


def test_the_app_s_driver_writes_frames_whole() -> None:
    app = live_app()
    cls = app.driver_class
    assert cls is driver_class(cls.__mro__[1])  # one class per driver, not one per app

    async def made() -> object:
        return cls(app)

    driver = asyncio.run(made())
    assert isinstance(driver._file, WholeWrites)  # type: ignore[attr-defined]
    assert driver._file.fileno() == sys.__stderr__.fileno()  # type: ignore[attr-defined,union-attr]


# the UI on a terminal that is non-blocking and read slowly: before, frames were cut short
# there (PYTHONUNBUFFERED=1: the rest of a frame dropped, the stop never reached the status
# line) or Textual's writer thread died on BlockingIOError (buffered: the screen froze)
NON_BLOCKING = textwrap.dedent(
    """\
    import os, sys
    os.set_blocking(2, False)  # 0, 1 and 2 are the same terminal: all of them
    os.execv(sys.executable, [sys.executable, "-m", "backstep", "run", "example.py"])
    """
)


@pytest.mark.parametrize("unbuffered", [True, False], ids=["unbuffered", "buffered"])
def test_frames_reach_a_busy_non_blocking_terminal_whole(tmp_path: Path, unbuffered: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "example.py").write_text(SCRIPT)
    if unbuffered:
        monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    else:
        monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    ui = Pty(["-c", NON_BLOCKING], tmp_path)
    try:
        time.sleep(3.0)  # nobody reads: the terminal fills while the UI draws its first frames
        screen = ui.expect(r" pass 1 .*stopped: start of pass before PowBackward0", timeout=60)
        for title in ("Graph", "Gradients", "Saved tensors", "Source", "Leaves", "Console"):
            assert f"─ {title}" in screen, screen
        assert "➜ PowBackward0" in screen
        assert not CUT_ESCAPE.search(ui.raw), "a frame was cut short"
        ui.press("q")
        assert ui.wait() is not None
    finally:
        ui.kill()


def test_output_moved_to_the_terminal_after_the_ui_is_gone_loses_nothing() -> None:
    """``outlive`` writes the script's output to the terminal once the UI is gone: a full,
    non-blocking terminal used to end the write at its first refusal, the rest dropped."""
    from backstep.process.outlive import _write_all

    read, write = os.pipe()
    os.set_blocking(write, False)
    data = bytes(range(256)) * 4096  # 1 MiB: far more than the pipe holds
    writer = threading.Thread(target=_write_all, args=(write, data))
    writer.start()
    try:
        got = _read_all(read, len(data), pause=0.0005)
    finally:
        writer.join(10)
        os.close(write)
        os.close(read)
    assert not writer.is_alive()
    assert got == data
