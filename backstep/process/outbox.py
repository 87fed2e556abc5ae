"""The debuggee's events leave on a thread of their own, so a busy UI never holds the script up.

A recorded 6,380-node pass is 4.4 MB of node events. Sent from the script's thread, every write
waited whenever the UI's reader had fallen behind (the socket's buffer holds a few hundred KB):
0.1 to 0.35 s a pass on a loaded machine, the script idle while the UI decoded. The ``Outbox``
queues the encoded lines and one thread writes them, in order; ``drain`` waits until all of
them are out (the session's end, ``os._exit``). Past ``limit`` queued bytes a writer waits, so
a UI that stops reading holds the script up as a plain socket would, never its memory.
"""

from __future__ import annotations

import threading
from collections import deque

from backstep.process.channel import Channel

LIMIT = 64 << 20


class Outbox:
    """Lines for one channel, written by a daemon thread in the order they were put."""

    def __init__(self, channel: Channel, limit: int = LIMIT) -> None:
        self.channel = channel
        self.limit = limit
        self._queue: deque[bytes] = deque()
        self._queued = 0  # bytes put and not yet written (those being written included)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def put(self, data: bytes) -> bool:
        """Queue whole encoded lines; False (nothing queued) once the channel is closed."""
        channel = self.channel
        if channel.closed:  # checked before the lock: in a fork, the channel was abandoned
            return False
        with self._cond:
            while self._queued > self.limit and not channel.closed:
                self._cond.wait(0.5)
            if channel.closed:
                return False
            self._queue.append(data)
            self._queued += len(data)
            if self._thread is None:
                self._thread = threading.Thread(target=self._write, name="backstep-outbox",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def _write(self) -> None:
        queue, cond = self._queue, self._cond
        while True:
            with cond:
                while not queue:
                    cond.wait()
                data = b"".join(queue)  # what piled up meanwhile goes in one write
                queue.clear()
            sent = self.channel.send_lines(data)
            with cond:
                self._queued -= len(data)
                if not sent:  # the UI is gone: what is queued will never be read
                    self._queued -= sum(map(len, queue))
                    queue.clear()
                cond.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far is written (or the channel failed); False if
        ``timeout`` seconds passed first."""
        if self.channel.closed:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._queued == 0 or self.channel.closed,
                                       timeout)
