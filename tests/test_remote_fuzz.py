"""Fuzz the remote UI's port of a script armed in this process with ``attach(listen=...)``:
random bytes, huge lines, bad JSON and slow-loris connections before the handshake, then
seeded bad commands from an authenticated UI at a paused pass. None of it crashes or hangs the
server, reaches the script (its gradients and output are plain PyTorch's), or keeps a good UI
out."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import backstep  # noqa: E402
from backstep.process import auth, remote  # noqa: E402
from backstep.process.attach import registry  # noqa: E402
from tests.command_fuzz import fuzz_command  # noqa: E402

SEED = 20261124


def compute() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    x = torch.randn(5, 4)
    torch.tanh(x @ w + b).pow(2).sum().backward()
    return w.grad.clone(), b.grad.clone()


def raw(address: tuple[str, int], data: bytes, *, close: bool = True) -> socket.socket:
    sock = socket.create_connection(address, timeout=5)
    with contextlib.suppress(OSError):
        sock.sendall(data)
    if close:
        sock.close()
    return sock


def answered(sock: socket.socket) -> bytes:
    """What the server says before it hangs up (it must hang up, and soon)."""
    sock.settimeout(5)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    sock.close()
    return data


@pytest.fixture
def armed(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(remote, "HANDSHAKE_TIMEOUT", 1.0)
    backstep.attach(listen="127.0.0.1:0", wait=False, source=False)
    server = registry.current.server
    assert server is not None
    host, port = server.address.rsplit(":", 1)
    try:
        yield server, (host, int(port))
    finally:
        backstep.detach()


def test_garbage_before_the_handshake_never_reaches_the_script(armed, capfd) -> None:
    plain = compute()
    capfd.readouterr()
    server, address = armed
    rng = random.Random(SEED)
    loris = []
    for _ in range(remote.MAX_HANDSHAKES):  # trickle a byte at a time, hold every slot
        loris.append(raw(address, b"{", close=False))
    extra = raw(address, b"", close=False)  # is served: the oldest is let go
    assert b"too many connections waiting" in answered(loris.pop(0))
    extra.settimeout(5)
    assert b'"challenge"' in extra.recv(4096)
    loris.append(extra)
    for sock in loris:
        with contextlib.suppress(OSError):
            sock.send(b'"')
    for sock in loris:  # cut off at the deadline, however they trickle
        assert b"timed out" in answered(sock)

    senders = []
    for i in range(40):
        kind = i % 5
        if kind == 0:
            data = rng.randbytes(rng.randrange(1, 4096))
        elif kind == 1:
            data = b"x" * (4 * 1024 * 1024)  # a huge line with no end
        elif kind == 2:
            data = json.dumps({"cmd": rng.choice(["continue", "abort", "start", "detach"]),
                               "token": server.token}).encode() + b"\n"
        elif kind == 3:
            data = json.dumps({"event": "hello", "nonce": rng.choice(["", "zz" * 32, None]),
                               "mac": rng.choice([server.token, 1, None, "0" * 64])}).encode() \
                + b"\n"
        else:
            data = b""
        senders.append(threading.Thread(
            target=lambda d=data: answered(raw(address, d, close=False))))
    grads = []
    worker = threading.Thread(target=lambda: grads.append(compute()))
    worker.start()
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(20)
        assert not thread.is_alive()
    worker.join(20)
    assert torch.equal(grads[0][0], plain[0]) and torch.equal(grads[0][1], plain[1])

    # still serving: a UI with the token gets in, and the refusals were one line each
    channel = remote.connect(address, server.token, timeout=5)
    assert channel.receive()["event"] == "session"
    channel.close()
    server.refusals.tick(now=True)  # as a UI's attaching or the window's end would
    out, err = capfd.readouterr()
    assert out == ""
    assert all(line.startswith("backstep: ") for line in err.splitlines()), err
    assert "refused a UI from 127.0.0.1" in err and "timed out" in err
    assert len(err.splitlines()) <= 3, "the first refusal, then a summary, not one line each"


def test_bad_commands_from_an_attached_ui_leave_the_pass_untouched(armed, capfd) -> None:
    plain = compute()
    server, address = armed
    with pytest.raises(auth.HandshakeError, match="wrong token"):
        remote.connect(address, server.token + "x", timeout=5)
    channel = remote.connect(address, server.token, timeout=5)
    assert channel.receive()["event"] == "session"
    channel.sock.sendall(b"garbage\n" + b"y" * (2 * 1024 * 1024) + b"\n")
    channel.send({"cmd": "start", "breakpoints": [], "stop_at_pass_start": True})
    assert server.wait_for_ui()
    grads: list[Any] = []
    worker = threading.Thread(target=lambda: grads.append(compute()))
    worker.start()
    events: list[dict[str, Any]] = []

    def until(kind: str) -> dict[str, Any]:
        while True:
            event = channel.receive()
            assert event is not None, events
            events.append(event)
            if event.get("event") == kind:
                return event

    stop = until("stopped")
    rng = random.Random(SEED)
    for _ in range(150):
        channel.sock.sendall(fuzz_command(rng, stop))
    channel.send({"cmd": "break", "breakpoints": []})
    channel.send({"cmd": "options", "stop_at_pass_start": False})
    marker = time.monotonic()
    channel.send({"cmd": "continue", "stop": stop["stop"]})
    while True:  # a fuzzed 'interrupt' may stop it once more: keep going
        event = channel.receive()
        assert event is not None and time.monotonic() - marker < 30
        if event.get("event") == "stopped":
            channel.send({"cmd": "continue", "stop": event["stop"]})
        if event.get("event") == "pass_end":
            break
    worker.join(20)
    assert not worker.is_alive()
    assert torch.equal(grads[0][0], plain[0]) and torch.equal(grads[0][1], plain[1])
    channel.close()
    assert capfd.readouterr().out == ""
