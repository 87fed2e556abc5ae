"""Challenge-response for the remote UI: the token proves itself without crossing the wire.

The debuggee (server) opens with ``{"event": "challenge", "nonce": S}``; the UI (client)
answers ``{"event": "hello", "nonce": C, "mac": HMAC-SHA256(token, "client" | S | C)}``; the
server checks it in constant time and answers ``{"event": "welcome", "mac": HMAC-SHA256(token,
"server" | S | C)}``, which the client checks in turn (so a UI never drives a stranger's
process thinking it is its own). A refusal is an ``error`` event, then the connection closes.
Both nonces are fresh 32-byte randoms, so a recorded exchange replays nowhere. Every line read
here is capped in size, and the server side has one total deadline for the whole exchange (a
slow-loris peer is cut off at it, however it trickles its bytes). Stdlib only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import time
from typing import Any

from backstep import protocol

SCHEME = "backstep-remote/1"
NONCE_BYTES = 32
MAX_HANDSHAKE_LINE = 1024  # a hello is ~200 bytes
_CLIENT = b"backstep client\0"
_SERVER = b"backstep server\0"


class HandshakeError(Exception):
    """The other side is not who it should be, or said something else than the handshake."""


def new_token() -> str:
    """A fresh random token, safe to paste in a shell (URL-safe base64)."""
    return secrets.token_urlsafe(24)


def proof(token: str, role: bytes, server_nonce: bytes, client_nonce: bytes) -> str:
    return hmac.new(token.encode(), role + server_nonce + client_nonce,
                    hashlib.sha256).hexdigest()


def _matches(offered: Any, expected: str) -> bool:
    if not isinstance(offered, str):
        return False
    return hmac.compare_digest(offered.encode("utf-8", "surrogatepass"), expected.encode())


def _nonce(value: Any) -> bytes:
    if not isinstance(value, str) or len(value) != 2 * NONCE_BYTES:
        raise HandshakeError("malformed handshake")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise HandshakeError("malformed handshake") from None


def send_line(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(protocol.encode(message))


def read_line(sock: socket.socket, deadline: float, limit: int = MAX_HANDSHAKE_LINE
              ) -> dict[str, Any]:
    """One JSON line, read up to its newline only (what follows belongs to the channel),
    by ``deadline`` (time.monotonic) at the latest."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise HandshakeError("handshake timed out")
        sock.settimeout(left)
        try:
            peeked = sock.recv(limit - len(data), socket.MSG_PEEK)
        except TimeoutError:
            raise HandshakeError("handshake timed out") from None
        if not peeked:
            raise HandshakeError("connection closed during the handshake")
        end = peeked.find(b"\n")
        data += sock.recv(len(peeked) if end < 0 else end + 1)
        if len(data) >= limit and not data.endswith(b"\n"):
            raise HandshakeError("handshake line too long")
    try:
        return protocol.decode(data)
    except protocol.ProtocolError:
        raise HandshakeError("malformed handshake") from None


HELLO_TIMEOUT = 5.0  # seconds from the challenge to the hello: a round trip, however slow


def serve(sock: socket.socket, token: str, timeout: float,
          admit: Any = None, heard: Any = None) -> None:
    """The debuggee's side; returns once the peer proved it knows ``token`` and has been
    welcomed. ``admit()`` (called only then) may raise HandshakeError to turn it away (another
    UI is attached); ``heard()`` is called once the peer's hello line is in. A peer that says
    nothing is cut off ``HELLO_TIMEOUT`` after the challenge (one round trip is all it needs),
    the whole exchange at ``timeout``. Raises HandshakeError with the reason otherwise;
    OSError if the connection fails."""
    start = time.monotonic()
    deadline = start + timeout
    server_nonce = secrets.token_bytes(NONCE_BYTES)
    sock.settimeout(max(deadline - time.monotonic(), 0.001))
    send_line(sock, {"event": "challenge", "scheme": SCHEME, "nonce": server_nonce.hex()})
    hello = read_line(sock, min(deadline, start + HELLO_TIMEOUT))
    if heard is not None:
        heard()
    if hello.get("event") != "hello":
        raise HandshakeError("malformed handshake")
    client_nonce = _nonce(hello.get("nonce"))
    if not _matches(hello.get("mac"), proof(token, _CLIENT, server_nonce, client_nonce)):
        raise HandshakeError("wrong token")
    if admit is not None:
        admit()
    sock.settimeout(max(deadline - time.monotonic(), 0.001))
    send_line(sock, {"event": "welcome", "mac": proof(token, _SERVER, server_nonce,
                                                      client_nonce)})
    sock.settimeout(None)


def join(sock: socket.socket, token: str, timeout: float) -> None:
    """The UI's side: prove the token, check the debuggee knows it too. Raises HandshakeError
    with a sentence for a person (wrong token, busy, not a backstep)."""
    deadline = time.monotonic() + timeout
    challenge = read_line(sock, deadline)
    if challenge.get("event") == "error":
        raise HandshakeError(str(challenge.get("message", "refused")))
    if challenge.get("event") != "challenge" or challenge.get("scheme") != SCHEME:
        raise HandshakeError("the other end is not a backstep debuggee waiting for a UI")
    server_nonce = _nonce(challenge.get("nonce"))
    client_nonce = secrets.token_bytes(NONCE_BYTES)
    send_line(sock, {"event": "hello", "nonce": client_nonce.hex(),
                     "mac": proof(token, _CLIENT, server_nonce, client_nonce)})
    try:
        reply = read_line(sock, deadline)
    except HandshakeError as exc:
        if "closed" in str(exc):
            raise HandshakeError("refused by the debuggee") from None
        raise
    if reply.get("event") == "error":
        raise HandshakeError(str(reply.get("message", "refused")))
    if reply.get("event") != "welcome" or \
            not _matches(reply.get("mac"), proof(token, _SERVER, server_nonce, client_nonce)):
        raise HandshakeError("the debuggee could not prove it knows the token")
    sock.settimeout(None)
