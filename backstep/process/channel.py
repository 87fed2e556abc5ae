"""One connection between the UI and the debuggee: ``protocol`` messages as JSON lines.

Made by ``transport`` once the peer has said hello; either side sends and receives on it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

from backstep import protocol, safe_text


class Channel:
    """One connected socket carrying JSON lines. ``send`` is thread-safe.

    ``max_line`` bounds one incoming line: the debuggee reads small commands, the UI big events.
    The UI sets ``shown``: what it reads goes to a screen, so every string in it is made
    printable (``safe_text.clean``) as it arrives; the debuggee reads its commands as sent.
    """

    def __init__(self, sock: socket.socket, max_line: int = protocol.MAX_LINE) -> None:
        self.sock = sock
        self.max_line = max_line
        self.shown = False
        self._file = sock.makefile("rb")
        self._send_lock = threading.Lock()
        self.closed = False
        self.abandoned = False
        self.last_line = b""  # the line ``receive`` read last

    def send(self, message: dict[str, Any]) -> bool:
        """Send one message; False (never an exception) once the peer is gone."""
        return self.send_lines(protocol.encode(message))

    def send_lines(self, data: bytes) -> bool:
        """Send whole, already encoded lines (a batch of events in one write); False once the
        peer is gone."""
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
        """The next message, or None at end of stream. Raises ProtocolError for garbage.
        ``last_line`` is the line it was read from."""
        self.last_line = b""
        line = self.receive_line()
        if line is None:
            return None
        message = self.parse(line)
        self.last_line = line
        return message

    def receive_line(self) -> bytes | None:
        """The next line as it came, not decoded (``parse`` decodes it as ``receive`` does),
        or None at end of stream. Raises ProtocolError for a line over ``max_line``."""
        try:
            line = self._file.readline(self.max_line + 1)
        except (OSError, ValueError):
            line = b""
        if not line:
            self.closed = True
            return None
        if len(line) > self.max_line and not line.endswith(b"\n"):
            self._discard_rest_of_line()
            raise protocol.ProtocolError(f"message longer than {self.max_line} bytes")
        return line

    def parse(self, line: bytes) -> Any:
        """One line as ``receive`` reads it: decoded, and made printable when ``shown`` (the
        UI's reader keeps a node event's line and reads it again when a panel wants it)."""
        message = protocol.decode(line)
        if self.shown and safe_text.suspect(line):
            try:
                message = safe_text.clean(message)
            except RecursionError:
                raise protocol.ProtocolError("message nested too deep") from None
        return message

    def incoming(self) -> Iterator[dict[str, Any]]:
        """Messages until the peer leaves; garbage is answered with an ``error`` event and
        skipped, so a bad line never ends the conversation. Only a read that keeps failing in
        some unforeseen way, not line after line of garbage, ends it like an end of stream."""
        failures = 0
        while True:
            try:
                message = self.receive()
                failures = 0
            except protocol.ProtocolError as exc:
                self.send(protocol.error_event(str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - no line may end the conversation
                failures += 1
                if failures > 10:
                    self.closed = True
                    return
                self.send(protocol.error_event(protocol.describe(exc)))
                continue
            if message is None:
                return
            yield message

    def _discard_rest_of_line(self) -> None:
        while True:
            chunk = self._file.readline(self.max_line)
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
        from backstep.process.forks import abandon_file

        self.closed = self.abandoned = True
        abandon_file(self._file)
        try:
            self.sock.close()  # the fd only: no shutdown
        except OSError:
            pass
