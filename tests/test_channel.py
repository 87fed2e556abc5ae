"""The channel holds against hostile input: handshakes that stall or lie, a second peer, another
user, commands no schema expects, and a token that never reaches the environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from backstep import protocol
from backstep.engine.controller import Controller
from backstep.engine.debuggee import _read_commands, wait_for_start
from backstep.events.breakpoints import parse_breakpoint
from backstep.events.commands import validate_command
from backstep.process import transport
from backstep.process.launcher import Debuggee

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets")


class Accepting:
    """``listener.accept`` on a thread, so a test can play the peers meanwhile."""

    def __init__(self, listener: transport.Listener, timeout: float = 30.0,
                 give_up: Any = None) -> None:
        self.result: list[transport.Channel | None] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(listener.accept(timeout, give_up=give_up)),
            daemon=True)
        self.thread.start()

    def channel(self, timeout: float = 30.0) -> transport.Channel | None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "accept never returned"
        return self.result[0]


def raw_peer(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def reply_of(sock: socket.socket) -> bytes:
    """What the listener answered before it hung up (it always hangs up)."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:  # it hung up on bytes it had not read: the rest is lost
        pass
    sock.close()
    return data


def hello(token: Any) -> bytes:
    return json.dumps({"event": "hello", "token": token}).encode() + b"\n"


def test_a_slow_loris_delays_no_one_and_is_cut_off_at_its_deadline() -> None:
    listener = transport.Listener(hello_timeout=1.0)
    try:
        accepting = Accepting(listener)
        loris = raw_peer(listener.path)
        cut_off = threading.Event()

        def drip() -> None:  # one byte every 50 ms, forever
            try:
                for byte in b'{"event": "hello", "token": "' + b"0" * 10_000:
                    loris.send(bytes([byte]))
                    time.sleep(0.05)
            except OSError:
                cut_off.set()

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        time.sleep(0.2)
        good = transport.connect(listener.path, listener.token)
        channel = accepting.channel()
        assert channel is not None  # the real peer got in while the loris was still dripping
        good.send({"event": "session"})
        assert channel.receive() == {"event": "session"}
        dripper.join(30)
        assert cut_off.is_set(), "the slow peer was never cut off"
        good.close()
        channel.close()
    finally:
        listener.close()


def test_a_slow_loris_alone_cannot_keep_accept_busy() -> None:
    listener = transport.Listener(hello_timeout=0.5)
    try:
        done = threading.Event()
        accepting = Accepting(listener, give_up=done.is_set)
        loris = raw_peer(listener.path)
        cut_off = False
        try:
            for byte in b'{"event": "hello", "token": "' + b"0" * 600:
                loris.send(bytes([byte]))
                time.sleep(0.05)
        except OSError:
            cut_off = True
        assert cut_off  # not left to drip for 30 s
        reply = reply_of(loris)
        assert reply == b"" or b"no hello in time" in reply  # the reason, unless it was reset
        done.set()
        assert accepting.channel() is None
    finally:
        listener.close()


@pytest.mark.parametrize("token", [
    "é" * 32,  # not ASCII: compare_digest on str raised TypeError here
    "\ud800" * 32,  # a lone surrogate cannot even be encoded as UTF-8
    "0" * 31,  # wrong length
    None, 12345, ["x"], {"a": 1},
], ids=["non-ascii", "surrogate", "short", "null", "int", "list", "dict"])
def test_bad_tokens_are_refused_and_the_real_peer_still_gets_in(token: Any) -> None:
    listener = transport.Listener()
    try:
        accepting = Accepting(listener)
        bad = raw_peer(listener.path)
        bad.sendall(hello(token))
        assert b"bad or missing token" in reply_of(bad)
        good = transport.connect(listener.path, listener.token)
        assert accepting.channel() is not None
        good.close()
    finally:
        listener.close()


def test_token_check_never_raises() -> None:
    token = "ab" * 16
    assert transport.token_matches(token, token)
    for offered in ("é" * 32, "\udcff", "", None, 1.5, ["ab" * 16], token + "0", token.upper()):
        assert not transport.token_matches(offered, token)


def test_once_the_peer_is_in_the_listener_is_gone_and_later_connects_are_refused() -> None:
    listener = transport.Listener()
    try:
        accepting = Accepting(listener)
        good = transport.connect(listener.path, listener.token)
        assert accepting.channel() is not None
        assert not os.path.exists(listener.path) and not os.path.exists(listener.directory)
        with pytest.raises(OSError):  # refused at once, not left hanging in a backlog
            transport.connect(listener.path, listener.token, timeout=5)
        assert listener.accept(timeout=5) is None  # and nothing is listening any more
        good.close()
    finally:
        listener.close()


def test_peer_credentials_are_read_and_another_user_is_refused() -> None:
    a, b = socket.socketpair()
    try:
        uid = transport.peer_uid(a)
        assert uid is None or uid == os.geteuid()
    finally:
        a.close()
        b.close()
    if getattr(socket, "SO_PEERCRED", None) is None:
        pytest.skip("no SO_PEERCRED on this platform")
    listener = transport.Listener()
    listener.uid = os.geteuid() + 1  # as if this process belonged to someone else
    try:
        done = threading.Event()
        accepting = Accepting(listener, give_up=done.is_set)
        peer = raw_peer(listener.path)
        assert b"another user" in reply_of(peer)  # refused before it could say a word
        done.set()
        assert accepting.channel() is None
    finally:
        listener.close()


def test_accept_gives_up_when_asked() -> None:
    listener = transport.Listener()
    try:
        asked = threading.Event()
        accepting = Accepting(listener, timeout=600.0, give_up=asked.is_set)
        asked.set()
        assert accepting.channel() is None
    finally:
        listener.close()


def test_a_peer_that_said_hello_and_died_at_once_is_still_accepted() -> None:
    listener = transport.Listener()
    try:
        good = transport.connect(listener.path, listener.token)
        good.send({"event": "session"})
        good.close()
        channel = listener.accept(30.0, give_up=lambda: True)
        assert channel is not None and channel.receive() == {"event": "session"}
    finally:
        listener.close()


def test_the_token_never_reaches_the_environment(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """\
        import os, sys, time
        from backstep.process import transport
        path, token = transport.address_from_environment()
        ch = transport.connect(path, token)
        left = sorted(k for k in os.environ
                      if k in (transport.ENV_SOCKET, transport.ENV_TOKEN_FD))
        ch.send({"event": "session", "left": left, "environ": open(
            f"/proc/{os.getpid()}/environ", "rb").read().decode(errors="replace")
            if os.path.exists(f"/proc/{os.getpid()}/environ") else ""})
        time.sleep(600)
        """
    )
    child = Debuggee([sys.executable, "-c", code], cwd=str(tmp_path))
    child.start()
    try:
        channel = child.accept(timeout=60)
        assert channel is not None
        session = channel.receive()
        assert session is not None and session["left"] == []
        token = child.listener.token
        assert token not in session["environ"]
        if os.path.exists(f"/proc/{child.process.pid}/environ"):
            assert token.encode() not in Path(f"/proc/{child.process.pid}/environ").read_bytes()
    finally:
        child.close(grace=0.2, kill_after=1.0)


def test_a_child_without_a_handoff_gets_nothing() -> None:
    saved = {k: os.environ.pop(k) for k in (transport.ENV_SOCKET, transport.ENV_TOKEN_FD)
             if k in os.environ}
    try:
        assert transport.address_from_environment() is None
    finally:
        os.environ.update(saved)


# -- commands no schema expects --------------------------------------------------------------

HOSTILE = [
    {"cmd": "break", "breakpoints": [{"kind": []}]},
    {"cmd": "break", "breakpoints": [{"kind": {"a": 1}}]},
    {"cmd": "break", "breakpoints": [{"kind": "norm", "above": 10**400}]},
    {"cmd": "break", "breakpoints": [{"kind": "norm", "above": float("inf")}]},
    {"cmd": "break", "breakpoints": [{"kind": "norm", "above": float("nan")}]},
    {"cmd": "break", "breakpoints": [{"kind": "node", "pattern": ["x"]}]},
    {"cmd": "break", "breakpoints": {"kind": "node"}},
    {"cmd": "break", "breakpoints": [None, 1, "x"]},
    {"cmd": "options", "stop_at_pass_start": "yes"},
    {"cmd": "tensor", "req": 10**400, "pass": 1, "node": 1, "slot": "grad_inputs", "index": 0},
    {"cmd": "tensor", "req": 1, "pass": 1, "node": 1, "slot": "grad_inputs", "index": 0,
     "offset": -1},
    {"cmd": ["step"]},
    {"cmd": {"x": 1}},
    {"cmd": "x" * 1_000_000},
    {"cmd": None},
    {},
]


@pytest.mark.parametrize("message", HOSTILE, ids=range(len(HOSTILE)))
def test_validation_only_ever_raises_protocol_error(message: dict[str, Any]) -> None:
    with pytest.raises(protocol.ProtocolError) as info:
        validate_command(message)
    assert len(str(info.value)) <= protocol.MAX_ERROR_TEXT


def test_every_hostile_command_is_an_error_reply_and_the_controller_still_works() -> None:
    out: list[dict[str, Any]] = []
    controller = Controller(out.append, [{"kind": "nonfinite"}], stop_at_pass_start=False)
    for message in [*HOSTILE, [1, 2], "step", 3, None]:
        controller.feed(message)  # type: ignore[arg-type]
    assert len(out) == len(HOSTILE) + 4
    assert all(e["event"] == "error" for e in out)
    assert all(len(protocol.encode(e)) < 600 for e in out)  # the 1 MB name is not echoed back
    assert controller.breakpoints.nonfinite and not controller.detached  # nothing changed
    controller.feed({"cmd": "break", "breakpoints": [{"kind": "norm", "above": 1e3}]})
    assert controller.breakpoints.norm_above == 1e3 and len(out) == len(HOSTILE) + 4


def test_error_text_is_short_whatever_it_quotes() -> None:
    assert len(protocol.error_event("x" * 10**7)["message"]) == protocol.MAX_ERROR_TEXT
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    assert len(protocol.quote(deep)) <= 100
    assert len(protocol.quote({"k" * 10**6: "v" * 10**6})) <= 100
    with pytest.raises(protocol.ProtocolError, match="finite"):
        parse_breakpoint("norm:inf")


def test_a_huge_line_gets_a_short_reply_and_a_command_line_is_capped(tmp_path: Path) -> None:
    a, b = socket.socketpair()
    channel = transport.Channel(a, max_line=protocol.MAX_COMMAND_LINE)
    writer = threading.Thread(target=lambda: (
        b.sendall(b'{"cmd": "' + b"x" * (16 * 1024 * 1024) + b'"}\n'),
        b.sendall(protocol.encode({"cmd": "step"})),
        b.shutdown(socket.SHUT_WR)), daemon=True)
    writer.start()
    messages = list(channel.incoming())
    writer.join(30)
    assert messages == [{"cmd": "step"}]
    b.settimeout(10)
    reply = b.recv(65536)
    assert b"longer than" in reply and len(reply) < 600
    channel.close()
    b.close()


class FakeChannel:
    """An incoming stream of messages; records what is sent back."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages
        self.sent: list[dict[str, Any]] = []

    def incoming(self) -> Any:
        yield from self.messages

    def send(self, message: dict[str, Any]) -> bool:
        self.sent.append(message)
        return True


def test_a_bad_start_is_refused_and_the_wait_goes_on() -> None:
    channel = FakeChannel([
        {"cmd": "start", "breakpoints": [{"kind": []}]},
        {"cmd": "start", "breakpoints": [{"kind": "norm", "above": 10**400}]},
        {"cmd": "step"},
        {"cmd": "start", "breakpoints": [{"kind": "nonfinite"}], "stop_at_pass_start": False},
    ])
    controller = wait_for_start(channel, lambda start: Controller(  # type: ignore[arg-type]
        channel.send, start.get("breakpoints") or [], start.get("stop_at_pass_start", True)))
    assert controller is not None and controller.breakpoints.nonfinite
    assert [e["event"] for e in channel.sent] == ["error"] * 3


def test_a_reader_that_ends_by_any_means_closes_the_controller() -> None:
    class Exploding(FakeChannel):
        def incoming(self) -> Any:
            yield {"cmd": "interrupt"}
            raise RuntimeError("the socket layer broke in a way nobody foresaw")

    controller = Controller(lambda e: None)
    with pytest.raises(RuntimeError):
        _read_commands(Exploding([]), controller)  # type: ignore[arg-type]
    assert controller.detached and not controller.live()  # no pause can outlive the reader


def test_attach_gives_up_at_once_when_its_ui_dies_at_startup(tmp_path: Path) -> None:
    from tests.pty_session import Pty

    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import sys
        import torch
        import backstep, backstep.process.attach.terminal
        backstep.process.attach.terminal.CONNECT_TIMEOUT = 3600.0  # the old code waited all of it
        backstep.process.attach.terminal.UI_COMMAND = [sys.executable, "-c", "import sys; sys.exit(3)"]
        x = torch.tensor(2.0, requires_grad=True)
        backstep.attach()
        (x * x).backward()
        print("grad", x.grad.item())
    """))
    session = Pty(["train.py"], tmp_path)
    try:
        assert session.wait(120) == 0
        session.pump(0.5)
        text = session.raw.decode(errors="replace")
        assert "backstep: could not attach: the debugger UI exited at startup (code 3)" in text
        assert "grad 4.0" in text
    finally:
        session.kill()


def test_the_real_debuggee_refuses_a_bad_start_then_runs(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran to the end')\n")
    child = Debuggee([sys.executable, "-m", "backstep.engine.debuggee", "--", str(script)],
                     cwd=str(tmp_path))
    child.start()
    try:
        channel = child.accept(timeout=60)
        assert channel is not None
        assert channel.receive()["event"] == "session"
        channel.send({"cmd": "start", "breakpoints": [{"kind": []}]})
        channel.send({"cmd": "start", "breakpoints": [{"kind": "norm", "above": 10**400}]})
        channel.send({"cmd": "start", "breakpoints": [], "stop_at_pass_start": True})
        events = []
        while (event := channel.receive()) is not None:
            events.append(event)
        assert [e["event"] for e in events[:2]] == ["error", "error"]
        assert events[-1]["event"] == "exit" and events[-1]["code"] == 0
        assert child.wait(30) == 0
    finally:
        child.close()


def test_reading_the_handoff_closes_its_fd_and_clears_the_environment() -> None:
    """So the script's own children inherit neither the variables nor the fd."""
    listener = transport.Listener()
    try:
        code = textwrap.dedent("""\
            import os, subprocess, sys
            from backstep.process import transport
            address = transport.address_from_environment()
            fd = int(sys.argv[1])
            try:
                os.fstat(fd)
                still_open = True
            except OSError:
                still_open = False
            print(address is not None, still_open, sorted(k for k in os.environ
                  if k.startswith("BACKSTEP")))
        """)
        variables = listener.handoff()
        (fd,) = listener.pass_fds
        result = subprocess.run([sys.executable, "-c", code, str(fd)], pass_fds=(fd,),
                                env={**os.environ, **variables}, capture_output=True,
                                text=True, timeout=60)
        listener.handed_off()
        with pytest.raises(OSError):
            os.fstat(fd)  # and the listener's own copy is closed too
        assert result.stdout.strip() == "True False []", result.stderr
    finally:
        listener.close()


def test_a_long_tmpdir_still_gets_a_socket_and_leaves_nothing_behind(tmp_path: Path,
                                                                     monkeypatch: Any) -> None:
    long = tmp_path / ("d" * 120)
    long.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(long))
    listener = transport.Listener()
    try:
        assert len(os.fsencode(listener.path)) < 104
        accepting = Accepting(listener)
        good = transport.connect(listener.path, listener.token)
        assert accepting.channel() is not None
        good.close()
    finally:
        listener.close()
    assert not os.path.exists(listener.directory) and list(long.iterdir()) == []


def test_attachs_command_loop_answers_hostile_commands_and_always_restores() -> None:
    from backstep.process.attach.terminal import UIAttachment

    class Channel(FakeChannel):
        closed = False

        def incoming(self) -> Any:
            yield from HOSTILE
            raise RuntimeError("the socket layer broke in a way nobody foresaw")

        def close(self) -> None:
            self.closed = True

    channel = Channel([])
    attachment = UIAttachment([], stop_at_pass_start=True, source=False)
    attachment.channel = channel  # type: ignore[assignment]
    attachment.controller = controller = Controller(channel.send)
    with pytest.raises(RuntimeError):
        attachment._serve()
    assert [e["event"] for e in channel.sent] == ["error"] * len(HOSTILE)
    assert controller.detached and channel.closed and attachment.channel is None
