"""The copy of the script's prints for a remote UI: the real stream gets every write first and
unchanged, the UI a copy only while one is attached, and the stream is otherwise the real one."""

from __future__ import annotations

import io
import sys

import pytest

from backstep.process import remote_output


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_writes_reach_the_real_stream_and_a_copy_only_while_attached(monkeypatch) -> None:
    real_out, real_err = Terminal(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", real_out)
    monkeypatch.setattr(sys, "stderr", real_err)
    sent: list[dict] = []
    attached = [False]
    restore = remote_output.install(sent.append, lambda: attached[0])
    try:
        print("before")
        attached[0] = True
        print("é" * 70_000, end="")
        print("warn", file=sys.stderr)
        assert sys.stdout.isatty() and sys.stdout.getvalue  # the real stream's own
    finally:
        restore()
    assert sys.stdout is real_out and sys.stderr is real_err
    assert real_out.getvalue() == "before\n" + "é" * 70_000
    assert real_err.getvalue() == "warn\n"
    assert "".join(e["text"] for e in sent if e["stream"] == "stdout") == "é" * 70_000
    assert [e["text"] for e in sent if e["stream"] == "stderr"] == ["warn", "\n"]
    assert all(len(e["text"]) <= remote_output.CHUNK and e["event"] == "output" for e in sent)


def test_a_failing_copy_never_fails_the_print(monkeypatch) -> None:
    real = io.StringIO()
    monkeypatch.setattr(sys, "stdout", real)

    def broken(event: dict) -> None:
        raise OSError("the UI is gone")

    restore = remote_output.install(broken, lambda: True)
    try:
        print("still printed")
    finally:
        restore()
    assert real.getvalue() == "still printed\n"


def test_the_copy_keeps_the_streams_protocol() -> None:
    """``with sys.stdout:`` works and closes the real stream, as in plain python."""
    real = Terminal()
    sent: list[dict] = []
    tee = remote_output.TeeStream(real, "stdout", sent.append, lambda: True)
    assert repr(tee) == repr(real)
    with tee as inside:
        assert inside is tee
        print("x", file=inside)
    assert real.closed and tee.closed
    assert [e["text"] for e in sent] == ["x", "\n"]
    with pytest.raises(ValueError, match="closed file"), tee:
        pass  # a closed stream refuses, as python's does
