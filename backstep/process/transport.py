"""A private local channel between the UI and the debuggee: JSON lines over a Unix socket.

The listening side makes a fresh directory only its user can enter (0700), listens on a socket
inside it, and hands the path (in the environment) and a random token (through an inherited
pipe, never the environment: ``/proc/<pid>/environ`` would show it for the life of the process)
to the other side. The first line the connecting side sends must be
``{"event": "hello", "token": ...}``. Every connection gets a total deadline for that line, a
peer of another user is refused (``SO_PEERCRED``, where the platform has it), several
connections are handled at once so a slow one delays no other, and once the peer is in the
listener stops listening: its socket and directory are gone, and later connects are refused.
After that, both sides exchange ``protocol`` messages.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import shutil
import socket
import stat
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any

from backstep import protocol
from backstep.process.channel import Channel

ENV_SOCKET = "BACKSTEP_SOCKET"
ENV_TOKEN_FD = "BACKSTEP_TOKEN_FD"

HELLO_TIMEOUT = 10.0  # total, from connect to the end of the hello line
MAX_HELLO = 1024  # a hello is ~80 bytes
MAX_PENDING = 16  # connections saying hello at once; more are refused at once
_POLL = 0.25  # how often ``accept`` asks whether to give up
_MAX_SOCKET_DIRECTORY = 96  # a socket path holds 104 bytes on macOS, 108 on Linux


def peer_uid(sock: socket.socket) -> int | None:
    """The effective uid of the process at the other end, or None where the platform cannot
    tell (no ``SO_PEERCRED``: only Linux and a few others have it)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid


def token_matches(offered: Any, token: str) -> bool:
    """Constant-time token check on bytes: any JSON value may arrive, none of them raises."""
    if not isinstance(offered, str):
        return False
    return secrets.compare_digest(offered.encode("utf-8", "surrogatepass"), token.encode())


class _Handshake:
    """A connection that has not said hello yet."""

    __slots__ = ("sock", "deadline", "data")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.data = b""


class Listener:
    """A private socket that accepts exactly one authenticated peer, then stops listening.

    ``max_line`` is what the accepted channel takes from its peer: commands where the debuggee
    listens (``attach``), events where the UI listens (``backstep run``).
    """

    def __init__(self, max_line: int = protocol.MAX_LINE,
                 hello_timeout: float = HELLO_TIMEOUT) -> None:
        self.max_line = max_line
        self.hello_timeout = hello_timeout
        self.uid = os.geteuid()  # the only user whose processes may connect
        self.directory = _private_directory()
        self.path = os.path.join(self.directory, "s")
        self.token = secrets.token_hex(16)
        self._pending: dict[socket.socket, _Handshake] = {}
        self.pass_fds: tuple[int, ...] = ()  # the token's pipe, while a child is being started
        self.server: socket.socket | None = None
        try:
            self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.server.bind(self.path)
            self.server.listen(MAX_PENDING)
            self.server.setblocking(False)
        except OSError:
            self.close()
            raise

    def handoff(self) -> dict[str, str]:
        """What a child needs to find and prove itself to this listener: environment variables
        naming the socket and an fd, a pipe that holds the token. Start the child with
        ``pass_fds=listener.pass_fds``, then call ``handed_off``."""
        self.handed_off()
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, self.token.encode() + b"\n")
        finally:
            os.close(write_end)
        self.pass_fds = (read_end,)
        return {ENV_SOCKET: self.path, ENV_TOKEN_FD: str(read_end)}

    def handed_off(self) -> None:
        """The child has its copy of the token's fd (or never will): close ours."""
        fds, self.pass_fds = self.pass_fds, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def accept(self, timeout: float | None = None,
               give_up: Callable[[], bool] | None = None) -> Channel | None:
        """Wait for the peer; None after ``timeout`` seconds, when ``give_up()`` says so (asked
        a few times a second: the peer died, the session closed), or once the listener is
        closed. Never raises. Connections that do not prove themselves are answered with an
        error line and closed; none of them can hold this up past its own deadline."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_round = False
        try:
            with selectors.DefaultSelector() as selector:
                if self.server is None:
                    return None
                selector.register(self.server, selectors.EVENT_READ)
                for sock in list(self._pending):
                    selector.register(sock, selectors.EVENT_READ)
                while True:
                    now = time.monotonic()
                    self._expire(now, selector)
                    wait = 0.0 if last_round else _POLL
                    for handshake in self._pending.values():
                        wait = min(wait, handshake.deadline - now)
                    if deadline is not None:
                        if now >= deadline:
                            return None
                        wait = min(wait, deadline - now)
                    ready = selector.select(max(wait, 0.0))
                    for key, _ in ready:
                        if key.fileobj is self.server:
                            self._take_connection(selector)
                            continue
                        channel = self._advance(key.fileobj, selector)  # type: ignore[arg-type]
                        if channel is not None:
                            self._stop_listening()
                            return channel
                    if last_round and not ready:
                        return None
                    # a peer that connected, said hello and died is in the buffers: one more
                    # round without waiting takes it before giving up
                    if give_up is not None and not last_round and give_up():
                        last_round = True
                    if self.server is None:
                        return None
        except (OSError, ValueError, RuntimeError):  # closed from another thread meanwhile
            return None

    def _take_connection(self, selector: selectors.BaseSelector) -> None:
        assert self.server is not None
        try:
            sock, _ = self.server.accept()
        except (BlockingIOError, InterruptedError):
            return
        uid = peer_uid(sock)
        if uid is not None and uid != self.uid:
            self._refuse(sock, "refused: the peer belongs to another user")
            return
        if len(self._pending) >= MAX_PENDING:
            self._refuse(sock, "refused: too many connections")
            return
        sock.setblocking(False)
        self._pending[sock] = _Handshake(sock, time.monotonic() + self.hello_timeout)
        selector.register(sock, selectors.EVENT_READ)

    def _advance(self, sock: socket.socket, selector: selectors.BaseSelector) -> Channel | None:
        """Read what has arrived of one hello, never past its newline (what follows belongs
        to the channel); a channel once the line is complete and right."""
        handshake = self._pending[sock]
        try:
            peeked = sock.recv(MAX_HELLO, socket.MSG_PEEK)
            end = peeked.find(b"\n")
            handshake.data += sock.recv(len(peeked) if end < 0 else end + 1)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            peeked = b""
        if not peeked:
            self._drop(sock, selector, None)
            return None
        if not handshake.data.endswith(b"\n"):
            if len(handshake.data) >= MAX_HELLO:
                self._drop(sock, selector, "bad or missing token")
            return None
        try:
            hello = protocol.decode(handshake.data)
        except protocol.ProtocolError:
            hello = None
        if hello is None or hello.get("event") != "hello" or \
                not token_matches(hello.get("token"), self.token):
            self._drop(sock, selector, "bad or missing token")
            return None
        del self._pending[sock]
        selector.unregister(sock)
        sock.setblocking(True)
        return Channel(sock, self.max_line)

    def _expire(self, now: float, selector: selectors.BaseSelector) -> None:
        for sock, handshake in list(self._pending.items()):
            if now >= handshake.deadline:
                self._drop(sock, selector, "no hello in time")

    def _drop(self, sock: socket.socket, selector: selectors.BaseSelector,
              why: str | None) -> None:
        self._pending.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            selector.unregister(sock)
        if why is None:
            sock.close()
        else:
            self._refuse(sock, why)

    @staticmethod
    def _refuse(sock: socket.socket, why: str) -> None:
        """Say why, then hang up. What the peer sent and nobody read is drained first: closing
        over unread data resets the connection, and the peer would never read the reason."""
        with contextlib.suppress(OSError):
            sock.setblocking(False)
            sock.send(protocol.encode(protocol.error_event(why)))
            sock.shutdown(socket.SHUT_WR)
            for _ in range(16):
                if not sock.recv(65536):
                    break
        with contextlib.suppress(OSError):
            sock.close()

    def _stop_listening(self) -> None:
        """No more peers: the socket, its directory and any half-made connection go."""
        server, self.server = self.server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.close()
        for sock in list(self._pending):
            self._pending.pop(sock, None)
            with contextlib.suppress(OSError):
                sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def close(self) -> None:
        """Stop listening for good (idempotent, from any thread); an accepted channel lives on."""
        self.handed_off()
        self._stop_listening()


def _private_directory() -> str:
    """A fresh 0700 directory for the socket, in TMPDIR unless that is too long to hold a
    socket path (about 100 bytes), then in /tmp."""
    directory = tempfile.mkdtemp(prefix="backstep-")
    if len(os.fsencode(directory)) > _MAX_SOCKET_DIRECTORY and os.path.isdir("/tmp"):
        os.rmdir(directory)
        directory = tempfile.mkdtemp(prefix="backstep-", dir="/tmp")
    os.chmod(directory, 0o700)
    return directory


def address_from_environment() -> tuple[str, str] | None:
    """The socket path and token a parent's ``Listener.handoff`` passed to this process, or
    None if it passed none. The variables leave ``os.environ`` and the token's fd is closed,
    so the script and anything it starts never see either."""
    path = os.environ.pop(ENV_SOCKET, "")
    fd_text = os.environ.pop(ENV_TOKEN_FD, "")
    if not path or not fd_text.isdigit():
        return None
    fd = int(fd_text)
    data = b""
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # never read (or close) some other fd
        raise OSError(f"{ENV_TOKEN_FD}={fd} is not the pipe backstep hands over")
    try:
        # up to the newline: a copy of the write end forked into some other process must not
        # keep this read waiting for an end of file
        while b"\n" not in data and len(data) < MAX_HELLO and (chunk := os.read(fd, MAX_HELLO)):
            data += chunk
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return path, data.split(b"\n")[0].decode("ascii", "replace")


def connect(path: str, token: str, timeout: float = 10.0,
            max_line: int = protocol.MAX_LINE) -> Channel:
    """The connecting side: connect and say hello with the token."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.settimeout(None)
    except OSError:
        sock.close()
        raise
    channel = Channel(sock, max_line)
    channel.send({"event": "hello", "token": token, "pid": os.getpid()})
    return channel
