"""The remote UI's handshake and port, without torch: the token never crosses the wire, both
sides prove it, and the server turns away the wrong token, a second UI and a stranger."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest

from backstep.process import auth, remote
from tests.remote_peer import TOKEN, listening


def handshake(server_token: str, client_token: str) -> tuple[Any, Any, bytes]:
    """Run both sides through a relay that records what the client puts on the wire; (server
    outcome, client outcome, the client's bytes)."""
    server_end, relay_in = socket.socketpair()
    relay_out, client_end = socket.socketpair()
    wire = bytearray()
    outcome: dict[str, Any] = {}

    def pipe(source: socket.socket, sink: socket.socket, record: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if record:
                    wire.extend(chunk)
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def serve() -> None:
        try:
            auth.serve(server_end, server_token, 5.0)
            outcome["server"] = "welcome"
        except auth.HandshakeError as exc:
            outcome["server"] = exc
        server_end.close()

    threads = [threading.Thread(target=serve),
               threading.Thread(target=pipe, args=(relay_in, relay_out, False)),
               threading.Thread(target=pipe, args=(relay_out, relay_in, True))]
    for thread in threads:
        thread.start()
    try:
        auth.join(client_end, client_token, 5.0)
        client: Any = "joined"
    except auth.HandshakeError as exc:
        client = exc
    client_end.close()
    for thread in threads:
        thread.join(10)
    for sock in (relay_in, relay_out):
        sock.close()
    return outcome["server"], client, bytes(wire)


def test_the_right_token_gets_in_without_crossing_the_wire() -> None:
    server, client, sent = handshake(TOKEN, TOKEN)
    assert server == "welcome" and client == "joined"
    assert TOKEN.encode() not in sent and b"hello" in sent


def test_a_wrong_token_is_refused_and_never_sent() -> None:
    server, client, sent = handshake(TOKEN, "guess")
    assert isinstance(server, auth.HandshakeError) and str(server) == "wrong token"
    assert isinstance(client, auth.HandshakeError)
    assert b"guess" not in sent and TOKEN.encode() not in sent


def test_a_ui_never_trusts_a_server_that_does_not_know_the_token() -> None:
    left, right = socket.socketpair()

    def impostor() -> None:  # echoes a welcome it cannot have computed
        auth.send_line(left, {"event": "challenge", "scheme": auth.SCHEME, "nonce": "00" * 32})
        auth.read_line(left, time.monotonic() + 5)
        auth.send_line(left, {"event": "welcome", "mac": "00" * 32})

    thread = threading.Thread(target=impostor)
    thread.start()
    with pytest.raises(auth.HandshakeError, match="could not prove"):
        auth.join(right, TOKEN, 5.0)
    thread.join(5)
    left.close()
    right.close()


@pytest.mark.parametrize(("text", "address"), [
    ("5678", ("127.0.0.1", 5678)),
    ("0.0.0.0:5678", ("0.0.0.0", 5678)),
    ("[::1]:0", ("::1", 0)),
    ("gpu-node:80", ("gpu-node", 80)),
])
def test_addresses(text: str, address: tuple[str, int]) -> None:
    assert remote.parse_address(text) == address


@pytest.mark.parametrize("text", ["", "host:", "host:port", "70000", ":-1"])
def test_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="HOST"):
        remote.parse_address(text)


def test_one_ui_at_a_time_and_refusals_logged_in_one_line() -> None:
    logs: list[str] = []
    server, controller, address = listening(logs)
    try:
        with pytest.raises(auth.HandshakeError, match="wrong token"):
            remote.connect(address, "guess", timeout=5)
        first = remote.connect(address, TOKEN, timeout=5)
        assert first.receive() == {"event": "session"}
        with pytest.raises(auth.HandshakeError, match="another UI is attached"):
            remote.connect(address, TOKEN, timeout=5)
        first.send({"cmd": "start", "breakpoints": ["nonfinite"]})  # refused: not the dict form
        assert first.receive()["event"] == "error"
        first.send({"cmd": "start", "breakpoints": [{"kind": "nonfinite"}]})
        assert server.wait_for_ui()
        assert not controller.detached and controller.breakpoints.nonfinite
        first.send({"cmd": "detach"})
        assert first.receive() is None  # the server hung up
        first.close()
        second = remote.connect(address, TOKEN, timeout=5)  # the slot is free again
        assert controller.detached  # and nothing stops until this one starts
        second.close()
    finally:
        server.close()
    refusals = [line for line in logs if "refused" in line]
    assert len(refusals) == 2 and all("\n" not in line for line in refusals)
    assert "wrong token" in refusals[0] and TOKEN not in "".join(logs)
