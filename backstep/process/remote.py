"""The debuggee's side of a remote UI: a TCP port where one authenticated UI at a time attaches.

``backstep run --listen`` and ``backstep.attach(listen=...)`` arm the engine with a controller
that starts closed (no UI: nothing stops) and a ``RemoteServer`` as its sink. A UI that connects
proves the token (``auth``), gets the ``session`` event, sends ``start``; from then on the
controller stops for it exactly as for a local UI. When it leaves (``q`` sends ``detach``, or
its connection drops, or stops reading for ``SEND_TIMEOUT``), every pause is released and
nothing stops until the next UI attaches: the script never waits on a UI that is not there.

A connection that fails the handshake is refused and forgotten; it never reaches the
controller or the script. Refusals are logged on stderr without flooding it (``refusals``: the
first in full, then one summary line per 10 s). Handshakes run on their own threads, at most
``MAX_HANDSHAKES`` at once, each with a total deadline and a short one for its hello
(``auth.HELLO_TIMEOUT``). When all are taken, a new connection does not wait or get refused: a
pending handshake is let go, never one whose hello has come (read, or whole in the socket's
buffer): the oldest of the silent ones, of the address that holds the most. The real UI sends
its hello one round trip after it connects; behind an SSH tunnel it comes from 127.0.0.1 like
any local flood, so what protects it is that it speaks: a flood of silent connections from its
own address would have to open ``MAX_HANDSHAKES`` of them within that one round trip (at 100 a
second, 1.28 s) to push it out. Eight silent sockets used to keep the real UI out for the whole
10 s deadline; 75-100 a second still did, in 4-5 tries of 30, while 32 slots were let go by
age alone.
Stdlib only (no torch, no textual).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from backstep import protocol
from backstep.events.breakpoints import Breakpoints
from backstep.events.commands import validate_command
from backstep.process import auth
from backstep.process.channel import Channel
from backstep.process.refusals import Refusals

ENV_LISTEN = "BACKSTEP_LISTEN"
ENV_TOKEN = "BACKSTEP_TOKEN"
DEFAULT_HOST = "127.0.0.1"
HANDSHAKE_TIMEOUT = 10.0  # total, from accept to welcome
MAX_HANDSHAKES = 128  # connections proving themselves at once; a new one lets a silent one go
EVICTED = "too many connections waiting to prove the token (the oldest was let go)"
SEND_TIMEOUT = 30  # seconds a UI may leave our events unread before it counts as gone
KEEPALIVE = (30, 10, 3)  # idle seconds, interval, probes: a vanished peer is noticed in ~1 min


def parse_address(text: str, default_host: str = DEFAULT_HOST) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT``; ValueError with a sentence otherwise."""
    text = text.strip()
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not [HOST:]PORT (a port is 0-65535)")
    return host, int(port)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def exposure_of(bound: str, address: str) -> str | None:
    """The warning for a server bound to IP ``bound`` (None for a loopback address)."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(bound.split("%")[0]).is_loopback:
            return None
    return (f"backstep: warning: {address} is reachable from the network; the token is the "
            "only protection (and nothing is encrypted): prefer 127.0.0.1 and an SSH tunnel")


def _tune(sock: socket.socket) -> None:
    """Notice a peer that vanished (keepalive) or stopped reading (send timeout): either way
    the UI is gone and its pauses must be released."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle, interval, count = KEEPALIVE
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    with contextlib.suppress(OSError, AttributeError):  # unacknowledged data: same limit
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                        1000 * (KEEPALIVE[0] + KEEPALIVE[1] * KEEPALIVE[2]))
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", SEND_TIMEOUT, 0))
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _lines_waiting(socks: list[socket.socket]) -> set[socket.socket]:
    """Those of ``socks`` with a whole line waiting in their buffer, unread (a hello on its way
    in): one ``poll`` for all, then a look (``MSG_PEEK``, never blocking: through a duplicate
    without the handshake's timeout, which would wait) at the few that have anything."""
    if not hasattr(select, "poll"):
        return set()
    poller = select.poll()
    by_fd = {}
    for sock in socks:
        with contextlib.suppress(OSError, ValueError):
            by_fd[sock.fileno()] = sock
            poller.register(sock.fileno(), select.POLLIN)
    found = set()
    for fd, _ in poller.poll(0):
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as view:
            if b"\n" in view.recv(auth.MAX_HANDSHAKE_LINE, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                found.add(by_fd[fd])
    return found


def _refuse(sock: socket.socket, why: str) -> None:
    """Say why (best effort, never blocking), then hang up."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(protocol.encode(protocol.error_event(f"refused: {why}")))
        sock.shutdown(socket.SHUT_WR)
        for _ in range(16):  # unread input would turn the close into a reset
            if not sock.recv(65536):
                break
    with contextlib.suppress(OSError):
        sock.close()


_log_lock = threading.Lock()


def _log(line: str) -> None:
    """One whole line on stderr, however many connection threads log at once."""
    with _log_lock, contextlib.suppress(Exception):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class RemoteServer:
    """A listening TCP socket and the one UI attached through it; the engine's sink.

    It listens from construction and serves from ``serve(controller)``: the controller, made
    with this server's ``emit``, must start closed. ``session`` is the event each new UI gets
    first.
    ``busy()`` says whether a pass a former UI was stepping still runs: a new UI is attached
    only once it has ended, so it never sees half a pass.
    """

    def __init__(self, address: tuple[str, int], session: dict[str, Any], *,
                 token: str | None = None, handshake_timeout: float | None = None,
                 busy: Callable[[], bool] | None = None,
                 log: Callable[[str], None] = _log) -> None:
        self.controller: Any = None
        self.session = session
        self.token = token or auth.new_token()
        self.handshake_timeout = HANDSHAKE_TIMEOUT if handshake_timeout is None \
            else handshake_timeout
        self.busy = busy
        self.log = log
        self.channel: Channel | None = None  # the attached UI, once it has sent ``start``
        self.closed = False
        self._claim: object | None = None  # the connection that holds the one UI slot
        self._lock = threading.Lock()
        self._started = threading.Event()  # a UI has attached (at least once)
        self.refusals = Refusals(log)
        # the connections proving themselves, oldest first, with their host; those let go
        self._pending: dict[socket.socket, str] = {}
        self._evicted: set[socket.socket] = set()
        self._heard: set[socket.socket] = set()  # pending ones whose hello has been read
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, port), family=family, backlog=MAX_HANDSHAKES)
        self.sock.settimeout(0.25)  # how often the accept loop asks whether to stop
        self.address = format_address(host, self.sock.getsockname()[1])

    def serve(self, controller: Any) -> None:
        """Start taking connections for ``controller`` (closed: nothing stops until a UI)."""
        self.controller = controller
        threading.Thread(target=self._accept_loop, name="backstep-listen", daemon=True).start()

    def announcement(self, wait: bool = True) -> str:
        """The one line the job prints on stderr: where, and the token to get in."""
        doing = "waiting for a UI" if wait else "the script runs; a UI may attach"
        return (f"backstep: {doing} on {self.address} (token {self.token}); attach "
                f"with: BACKSTEP_TOKEN={self.token} backstep connect {self.address}")

    def exposure(self) -> str | None:
        """One line of warning when the port is reachable from other machines (None: loopback
        only): then the token is all that keeps others out."""
        return exposure_of(str(self.sock.getsockname()[0]), self.address)

    # -- the sink ---------------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        channel = self.channel
        if channel is not None and not channel.send(event):
            self._hang_up(channel)  # it stopped reading: its reader ends, its pauses go

    def flush(self) -> None:
        pass

    def attached(self) -> bool:
        """Whether a UI is attached now (a cheap check before making an event for it)."""
        return self.channel is not None

    # -- waiting ----------------------------------------------------------------------------
    def wait_for_ui(self) -> bool:
        """Block until a UI has attached (True) or the server closed (False)."""
        while not self._started.wait(0.25):
            if self.closed:
                return False
        return True

    # -- connections ------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self.closed:
            self.refusals.tick()
            try:
                sock, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.closed:
                    return
                time.sleep(0.05)  # out of fds, say: never spin
                continue
            who = format_address(str(peer[0]), int(peer[1]))
            with self._lock:
                if len(self._pending) >= MAX_HANDSHAKES:
                    self._let_go(self._to_let_go())
                self._pending[sock] = str(peer[0])
            threading.Thread(target=self._connection, args=(sock, who),
                             name="backstep-remote-ui", daemon=True).start()

    def _to_let_go(self) -> socket.socket:
        """The pending handshake to let go (lock held): of those that have not said their hello
        (none read, none whole in the socket's buffer), the oldest of the host with the most;
        only when every one has spoken, the oldest of the busiest host."""
        waiting = _lines_waiting([sock for sock in self._pending if sock not in self._heard])
        silent = {sock: host for sock, host in self._pending.items()
                  if sock not in self._heard and sock not in waiting}
        pool = silent or self._pending
        counts: dict[str, int] = {}
        for host in pool.values():
            counts[host] = counts.get(host, 0) + 1
        busiest = max(counts, key=counts.__getitem__)
        return next(sock for sock, host in pool.items() if host == busiest)

    def _heard_from(self, sock: socket.socket) -> None:
        with self._lock:
            if sock in self._pending:
                self._heard.add(sock)

    def _let_go(self, sock: socket.socket) -> None:
        """End a pending handshake from here (lock held): its thread sees the end and leaves."""
        del self._pending[sock]
        self._heard.discard(sock)
        self._evicted.add(sock)
        with contextlib.suppress(OSError):
            sock.send(protocol.encode(protocol.error_event(f"refused: {EVICTED}")),
                      socket.MSG_DONTWAIT)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _connection(self, sock: socket.socket, who: str) -> None:
        claim = object()

        def admit() -> None:
            with self._lock:
                if self.closed:
                    raise auth.HandshakeError("the script is ending")
                if self._claim is not None:
                    raise auth.HandshakeError("another UI is attached to this script")
                self._claim = claim

        try:
            try:
                auth.serve(sock, self.token, self.handshake_timeout, admit,
                           lambda: self._heard_from(sock))
            finally:
                with self._lock:
                    self._pending.pop(sock, None)
                    self._heard.discard(sock)
                    evicted = sock in self._evicted
                    self._evicted.discard(sock)
            if evicted:  # let go just as it proved itself: it must come again
                raise auth.HandshakeError(EVICTED)
        except auth.HandshakeError as exc:
            self.refusals.refused(who, EVICTED if evicted else str(exc))
            with self._lock:
                if self._claim is claim:
                    self._claim = None
            _refuse(sock, str(exc))
            return
        except Exception:  # noqa: BLE001 - the peer went away (OSError) or worse: drop it
            with self._lock:
                if self._claim is claim:
                    self._claim = None
            with contextlib.suppress(OSError):
                sock.close()
            return
        _tune(sock)
        channel = Channel(sock, protocol.MAX_COMMAND_LINE)
        try:
            self._serve(channel, who)
        finally:
            with self._lock:
                if self.channel is channel:
                    self.channel = None
            self.controller.close()  # every pause released, nothing stops until the next UI
            with self._lock:
                self._claim = None
            channel.close()

    def _serve(self, channel: Channel, who: str) -> None:
        if not channel.send(self.session):
            return
        start = self._wait_for_start(channel)
        if start is None:
            return
        while self.busy is not None and self.busy() and not channel.closed:
            time.sleep(0.05)  # a pass the former UI stepped still runs: let it end unseen
        if self.closed:
            return
        # the events of what the new controller decides must reach the new UI: attach first
        with self._lock:
            self.channel = channel
        self.controller.reopen(start.get("breakpoints") or [],
                               start.get("stop_at_pass_start", True))
        self._started.set()
        self.refusals.tick(now=True)  # what was refused before it, first
        self.log(f"backstep: a UI attached from {who}")
        for message in channel.incoming():
            if message.get("cmd") == "detach":
                break
            self.controller.feed(message)
        if not self.closed:
            self.log("backstep: the UI left; the script runs on without stopping until one "
                     "attaches again")

    def _wait_for_start(self, channel: Channel) -> dict[str, Any] | None:
        """The UI's ``start``; anything else gets an error and the wait goes on."""
        for message in channel.incoming():
            try:
                validate_command(message)
                if message["cmd"] == "detach":
                    return None
                if message["cmd"] != "start":
                    raise protocol.ProtocolError("waiting for 'start'")
                Breakpoints.from_list(message.get("breakpoints") or [])
                return message
            except Exception as exc:  # noqa: BLE001 - one bad command must not end the session
                channel.send(protocol.error_event(protocol.describe(exc)))
        return None

    @staticmethod
    def _hang_up(channel: Channel) -> None:
        with contextlib.suppress(OSError):
            channel.sock.shutdown(socket.SHUT_RDWR)

    # -- the end ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop listening; the attached UI reads what was sent (the ``exit`` event), then the
        end of the stream. Idempotent, from any thread."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            channel = self.channel
        self.refusals.tick(now=True)
        with contextlib.suppress(OSError):
            self.sock.close()
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.sock.shutdown(socket.SHUT_WR)
        if self.controller is not None:
            self.controller.close()

    def forget(self) -> None:
        """In a forked child: let go of the parent's sockets without a word or a shutdown."""
        self.closed = True
        channel, self.channel = self.channel, None
        if channel is not None:
            channel.abandon()
        with contextlib.suppress(OSError):
            self.sock.close()


def connect(address: tuple[str, int], token: str, timeout: float = 10.0) -> Channel:
    """The UI's side: connect, prove the token, return the channel (big events come in).
    Raises OSError (cannot reach) or ``auth.HandshakeError`` (refused)."""
    sock = socket.create_connection(address, timeout=timeout)
    try:
        auth.join(sock, token, timeout)
    except BaseException:
        sock.close()
        raise
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Channel(sock, protocol.MAX_LINE)
