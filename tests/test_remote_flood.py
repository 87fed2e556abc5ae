"""Issue 45: a steady flood of silent connections from the UI's own address (behind an SSH
tunnel the real UI comes from 127.0.0.1 too) never keeps the real UI out. Before, 75-100 silent
connections a second got the real ``connect`` refused ("too many connections waiting to prove
the token") in 4-5 of 17-33 tries: 32 slots were let go by age alone, the real UI's among them.
Loopback only; the flood runs in a process of its own, every loop bounded."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time

import pytest

from backstep.process import auth, remote
from tests.remote_peer import TOKEN, listening

FLOOD = """\
import socket, sys, time
host, port, rate, burst, seconds = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
held, start = [], time.monotonic()
print("flooding", flush=True)
while time.monotonic() - start < seconds:
    for _ in range(int(burst)):  # in bursts, as a busy sender's connections come
        try:
            held.append(socket.create_connection((host, port), timeout=1))  # and never a word
        except OSError:
            pass
    while len(held) > 600:
        held.pop(0).close()
    time.sleep(burst / rate)
"""


@pytest.mark.parametrize("rate, burst", [(100.0, 40)])
def test_a_flood_of_silent_connections_never_keeps_the_real_ui_out(rate: float,
                                                                   burst: int) -> None:
    logs: list[str] = []
    server, _, address = listening(logs)
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, address[0], str(address[1]),
                              str(rate), str(burst), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout is not None and flood.stdout.readline() == "flooding\n"
        time.sleep(2.0)  # every slot taken, and taken again
        refused, tries, ended = [], 0, time.monotonic() + 20
        while tries < 20 and time.monotonic() < ended:
            try:
                channel = remote.connect(address, TOKEN, timeout=10)
            except auth.HandshakeError as exc:
                if "another UI is attached" in str(exc):  # the last try still detaching
                    time.sleep(0.05)
                    continue
                refused.append(str(exc))
                tries += 1
                continue
            tries += 1
            assert channel.receive() == {"event": "session"}
            channel.close()
            while server._claim is not None and time.monotonic() < ended:  # noqa: SLF001
                time.sleep(0.01)
        assert tries == 20, "the tries did not finish in time"
        assert refused == [], f"{len(refused)} of {tries} refused: {refused[:3]}"
    finally:
        flood.kill()
        flood.wait()
        server.close()


def burst(address: tuple[str, int], count: int) -> list[socket.socket]:
    """``count`` silent connections, each accepted (its challenge came) before the next."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=5)
        assert b'"challenge"' in sock.recv(4096)
        socks.append(sock)
    return socks


@pytest.mark.parametrize("spoken", [False, True])
def test_a_burst_within_the_uis_round_trip_does_not_push_it_out(spoken: bool) -> None:
    """The worst timing: the burst comes between the real UI's connect and its hello
    (``spoken``: between its hello and the welcome). Before: 33 silent connections then were
    enough to let the real UI go; now a UI that has spoken is never let go, and one that has
    not yet would need ``MAX_HANDSHAKES`` connections newer than it."""
    logs: list[str] = []
    server, _, address = listening(logs)
    held = burst(address, 60)  # an old flood, older than the UI: let go first
    try:
        ui = socket.create_connection(address, timeout=10)
        challenge = auth.read_line(ui, time.monotonic() + 10)
        server_nonce = bytes.fromhex(challenge["nonce"])
        client_nonce = secrets.token_bytes(auth.NONCE_BYTES)
        hello = {"event": "hello", "nonce": client_nonce.hex(),
                 "mac": auth.proof(TOKEN, auth._CLIENT, server_nonce, client_nonce)}  # noqa: SLF001
        if spoken:
            auth.send_line(ui, hello)
        held += burst(address, 40 if not spoken else remote.MAX_HANDSHAKES + 10)
        if not spoken:
            auth.send_line(ui, hello)
        reply = auth.read_line(ui, time.monotonic() + 10)
        assert reply["event"] == "welcome", reply
        ui.close()
    finally:
        for sock in held:
            sock.close()
        server.close()
