"""The debuggee started before the UI: the script imports torch while Textual loads.

``backstep run`` used to start its child only once the app was mounted, half a second of
Textual's import and start-up that the script then waited out before its first line ran. A
``HeadStart`` starts the child at once (stdlib only: nothing here imports textual), keeps what
it prints until the console is there to show it, and sends ``start`` as soon as it connects, so
the script runs meanwhile. Its events wait in the socket until the UI reads them.
"""

from __future__ import annotations

import threading
from typing import Any

from backstep.process.launcher import Debuggee, OutputCallback
from backstep.process.transport import Channel


class HeadStart:
    """One debuggee started ahead of its UI, handed over to it with ``attach``."""

    def __init__(self, argv: list[str], start: dict[str, Any],
                 connect_timeout: float = 60.0) -> None:
        self.start_message = start
        self.connect_timeout = connect_timeout
        self.debuggee = Debuggee(argv, on_output=self._forward)
        self.error: OSError | None = None  # the child could not be started
        self.channel: Channel | None = None  # once ``connected``: None if it never connected
        self.connected = threading.Event()
        self._output: OutputCallback | None = None
        self._held: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the child and, on a thread, wait for it to connect and send it ``start``."""
        try:
            self.debuggee.start()
        except OSError as exc:
            self.error = exc
            self.connected.set()
            return
        threading.Thread(target=self._connect, name="backstep-head-start", daemon=True).start()

    def _connect(self) -> None:
        channel = self.debuggee.accept(self.connect_timeout)
        if channel is not None:
            channel.shown = True  # its strings reach the screen: made printable as they arrive
            channel.send(self.start_message)
        self.channel = channel
        self.connected.set()

    def _forward(self, text: str, stream: str) -> None:
        with self._lock:
            output = self._output
            if output is None:
                self._held.append((text, stream))
                return
        output(text, stream)

    def attach(self, output: OutputCallback) -> None:
        """The console is up: what the script printed so far goes to ``output``, in order, and
        everything after it too."""
        with self._lock:  # a pump waits here, so nothing overtakes what was held
            for text, stream in self._held:
                output(text, stream)
            self._held = []
            self._output = output

    def close(self) -> None:
        """End the child for good (idempotent): the UI never came up, or has gone."""
        self.debuggee.close()
