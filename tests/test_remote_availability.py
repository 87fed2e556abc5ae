"""The remote UI's port stays open to the real UI: silent connections cannot hold every
handshake slot, refusals do not flood the job's log, and a port reachable from the network is
said to be. Loopback only, every loop bounded."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from backstep.process import remote
from backstep.process.refusals import Refusals
from tests.remote_peer import TOKEN, listening


@pytest.fixture
def served() -> Iterator[tuple[remote.RemoteServer, tuple[str, int], list[str]]]:
    logs: list[str] = []
    server, _, address = listening(logs)
    try:
        yield server, address, logs
    finally:
        server.close()


def silent(address: tuple[str, int], count: int) -> list[socket.socket]:
    """Connections that say nothing: each holds a handshake until its deadline."""
    socks = [socket.create_connection(address, timeout=5) for _ in range(count)]
    for sock in socks:  # each has been accepted: its challenge came
        assert sock.recv(4096).startswith(b'{"event"')
    return socks


@pytest.mark.parametrize("count", [8, remote.MAX_HANDSHAKES + 8])
def test_silent_connections_never_keep_the_real_ui_out(served, count: int) -> None:
    server, address, _ = served
    held = silent(address, count)
    try:
        began = time.monotonic()
        channel = remote.connect(address, TOKEN, timeout=5)
        assert time.monotonic() - began < 2, "in at once, not after the 10 s deadline"
        assert channel.receive() == {"event": "session"}
        channel.close()
    finally:
        for sock in held:
            sock.close()


def test_a_flood_from_one_address_lets_its_oldest_go(served) -> None:
    server, address, logs = served
    held = silent(address, remote.MAX_HANDSHAKES + 1)
    try:
        held[0].settimeout(5)
        said = b""
        with contextlib.suppress(OSError):
            while chunk := held[0].recv(4096):
                said += chunk
        assert b"too many connections waiting to prove the token" in said
        held[1].setblocking(False)
        with pytest.raises(BlockingIOError):  # the next oldest still waits: nothing was said
            held[1].recv(1)
    finally:
        for sock in held:
            sock.close()


def test_many_refusals_are_one_line_and_a_summary(served) -> None:
    server, address, logs = served
    for _ in range(60):
        with socket.create_connection(address, timeout=5) as sock:
            sock.sendall(b"not a hello\n")
            with contextlib.suppress(OSError):
                while sock.recv(4096):
                    pass
    channel = remote.connect(address, TOKEN, timeout=5)
    assert channel.receive() == {"event": "session"}
    channel.send({"cmd": "start"})
    assert server.wait_for_ui()
    end = time.monotonic() + 10
    while not any("attached" in line for line in logs):
        assert time.monotonic() < end
        time.sleep(0.02)
    channel.close()
    refused = [line for line in logs if "refused" in line]
    assert refused[0].startswith("backstep: refused a UI from 127.0.0.1:")
    assert refused[0].endswith(": malformed handshake")
    assert len(refused) == 2, logs
    assert refused[1].startswith("backstep: refused 59 more UI connection(s) in ")
    assert "(59 malformed handshake); the last from 127.0.0.1:" in refused[1]


def test_refusals_are_summed_up_once_a_window() -> None:
    now = [0.0]
    lines: list[str] = []
    refusals = Refusals(lines.append, window=10, clock=lambda: now[0])
    for i in range(500):
        now[0] = i * 0.01
        refusals.refused(f"10.0.0.1:{i}", "wrong token" if i % 2 else "handshake timed out")
    assert lines == ["backstep: refused a UI from 10.0.0.1:0: handshake timed out"]
    now[0] = 9.0
    refusals.tick()
    assert len(lines) == 1
    now[0] = 10.5
    refusals.tick()
    assert lines[1] == ("backstep: refused 499 more UI connection(s) in 10 s (250 wrong token, "
                        "249 handshake timed out); the last from 10.0.0.1:499")
    now[0] = 30.0
    refusals.tick()  # a window with nothing: quiet again, and the next one is said in full
    refusals.refused("10.0.0.2:1", "wrong token")
    assert lines[2:] == ["backstep: refused a UI from 10.0.0.2:1: wrong token"]


@pytest.mark.parametrize("bound, reachable", [
    ("127.0.0.1", False), ("127.0.1.1", False), ("::1", False),
    ("0.0.0.0", True), ("::", True), ("10.1.2.3", True), ("fe80::1%eth0", True),
])
def test_a_port_reachable_from_the_network_is_said_to_be(bound: str, reachable: bool) -> None:
    said = remote.exposure_of(bound, "HOST:1")
    assert (said is not None) == reachable
    if said is not None:
        assert said.startswith("backstep: warning: HOST:1 is reachable from the network; the "
                               "token is the only protection")


def test_the_announcement_says_whether_the_script_waits(served) -> None:
    server, _, _ = served
    assert server.announcement().startswith("backstep: waiting for a UI on 127.0.0.1:")
    assert "waiting" not in server.announcement(wait=False)
    assert server.exposure() is None
