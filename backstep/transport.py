"""A private local channel between the UI and the debuggee: JSON lines over a Unix socket.

The listening side makes a fresh directory only its user can enter (0700), listens on a socket
inside it, and hands the path and a random token to the other side through the environment.
The first line the connecting side sends must be ``{"event": "hello", "token": ...}``; anything
else closes the connection. After that, both sides exchange ``protocol`` messages.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from backstep import protocol

ENV_SOCKET = "BACKSTEP_SOCKET"
ENV_TOKEN = "BACKSTEP_TOKEN"


class Channel:
    """One connected socket carrying JSON lines. ``send`` is thread-safe."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._file = sock.makefile("rb")
        self._send_lock = threading.Lock()
        self.closed = False
        self.abandoned = False

    def send(self, message: dict[str, Any]) -> bool:
        """Send one message; False (never an exception) once the peer is gone."""
        data = protocol.encode(message)
        with self._send_lock:
            if self.closed:
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                self.closed = True
                return False

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None at end of stream. Raises ProtocolError for garbage."""
        try:
            line = self._file.readline(protocol.MAX_LINE + 1)
        except (OSError, ValueError):
            line = b""
        if not line:
            self.closed = True
            return None
        if len(line) > protocol.MAX_LINE and not line.endswith(b"\n"):
            self._discard_rest_of_line()
            raise protocol.ProtocolError("message too long")
        return protocol.decode(line)

    def incoming(self) -> Iterator[dict[str, Any]]:
        """Messages until the peer leaves; garbage is answered with an ``error`` event and
        skipped, so a bad line never ends the conversation."""
        while True:
            try:
                message = self.receive()
            except protocol.ProtocolError as exc:
                self.send({"event": "error", "message": str(exc), "req": None})
                continue
            if message is None:
                return
            yield message

    def _discard_rest_of_line(self) -> None:
        while True:
            chunk = self._file.readline(protocol.MAX_LINE)
            if not chunk or chunk.endswith(b"\n"):
                return

    def close(self) -> None:
        """Close from any thread: shutting the socket down first wakes a reader blocked in
        ``receive`` (closing its buffered file first would wait on that reader's lock)."""
        if self.abandoned:
            return
        self.closed = True
        for closer in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close,
                       self._file.close):
            try:
                closer()
            except OSError:
                pass


    def abandon(self) -> None:
        """In a forked child: drop the inherited socket without shutting it down (that would cut
        the parent's connection) and without the reader's buffered-file lock, which a parent
        thread may have held at fork time (the raw file is closed, so the buffered one is never
        flushed or closed again). ``close`` and ``send`` are no-ops afterwards."""
        from backstep.engine.forks import abandon_file

        self.closed = self.abandoned = True
        abandon_file(self._file)
        try:
            self.sock.close()  # the fd only: no shutdown
        except OSError:
            pass


class Listener:
    """The UI side: a private socket that accepts exactly one authenticated peer."""

    def __init__(self) -> None:
        self.directory = _socket_directory()
        os.chmod(self.directory, 0o700)
        self.path = os.path.join(self.directory, "s")
        self.token = secrets.token_hex(16)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.server.bind(self.path)
            self.server.listen(1)
        except OSError:
            self.server.close()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    def environment(self) -> dict[str, str]:
        """What the debuggee needs to find and prove itself to this listener."""
        return {ENV_SOCKET: self.path, ENV_TOKEN: self.token}

    def accept(self, timeout: float | None = None) -> Channel | None:
        """Wait for the debuggee; None on timeout or a peer without the token."""
        self.server.settimeout(timeout)
        while True:
            try:
                sock, _ = self.server.accept()
            except (TimeoutError, OSError):
                return None
            sock.settimeout(None)
            channel = Channel(sock)
            sock.settimeout(timeout)
            try:
                hello = channel.receive()
            except (protocol.ProtocolError, OSError):
                hello = None
            sock.settimeout(None)
            if (
                hello is not None
                and hello.get("event") == "hello"
                and isinstance(hello.get("token"), str)
                and secrets.compare_digest(hello["token"], self.token)
            ):
                return channel
            channel.send({"event": "error", "message": "bad or missing token"})
            channel.close()

    def close(self) -> None:
        try:
            self.server.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _socket_directory() -> str:
    """A fresh private directory whose socket path fits AF_UNIX's limit (about 100 bytes): in
    TMPDIR, or in /tmp when TMPDIR is too long for it."""
    directory = tempfile.mkdtemp(prefix="backstep-")
    if len(os.fsencode(os.path.join(directory, "s"))) <= 100 or not os.path.isdir("/tmp"):
        return directory
    os.rmdir(directory)
    return tempfile.mkdtemp(prefix="backstep-", dir="/tmp")


def connect(path: str, token: str, timeout: float = 10.0) -> Channel:
    """The debuggee side: connect and say hello with the token."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(path)
    sock.settimeout(None)
    channel = Channel(sock)
    channel.send({"event": "hello", "token": token, "pid": os.getpid()})
    return channel
