"""The real Link: a debuggee child process behind a private socket.

``open`` (called when the app is mounted) starts the child unless ``launch`` gave it a head start
(``process.head_start``), forwards its output to the console panel, and on a background thread
waits for it to connect (it gets ``start`` at once) and runs the reader.
``close`` ends the child for good; ``launch`` calls it again after the app returns, so a crash
of the UI still leaves no orphan.
"""

from __future__ import annotations

import threading
from typing import Any

from backstep.process.head_start import HeadStart
from backstep.process.launcher import Debuggee
from backstep.tui.messages import ConsoleOutput, Disconnected, ServerError
from backstep.tui.runtime.link import LinkedApp


class LiveLink:
    """Runs ``argv`` as the debuggee and connects it to the app."""

    def __init__(self, argv: list[str], connect_timeout: float = 60.0,
                 head_start: HeadStart | None = None) -> None:
        self.argv = argv
        self.connect_timeout = connect_timeout
        self.head_start = head_start  # the debuggee, if started before the app (``launch``)
        self.debuggee: Debuggee | None = head_start.debuggee if head_start is not None else None
        self.thread: threading.Thread | None = None

    def open(self, app: LinkedApp) -> None:
        def output(text: str, stream: str) -> None:
            app.post_message(ConsoleOutput(text, stream))

        start = self.head_start
        if start is None:  # not started ahead of the app: now
            start = self.head_start = HeadStart(self.argv, app.start_message(),
                                                self.connect_timeout)
            start.start()
        self.debuggee = start.debuggee
        start.attach(output)
        if start.error is not None:
            app.post_message(ServerError(f"could not start the debuggee: {start.error}"))
            app.post_message(Disconnected(None))
            return
        self.thread = threading.Thread(target=self._serve, args=(app,), name="backstep-link",
                                       daemon=True)
        self.thread.start()

    def _serve(self, app: LinkedApp) -> None:
        debuggee, start = self.debuggee, self.head_start
        assert debuggee is not None and start is not None
        start.connected.wait()  # it connects and gets ``start`` on the head start's thread
        channel = start.channel
        if channel is None:
            code = debuggee.wait(2.0)
            debuggee.wait_output(1.0)
            if code is None:
                app.post_message(ServerError("the debuggee did not connect in time"))
            app.post_message(Disconnected(code))
            return
        app.reader.run(channel)  # returns when the stream ends
        code = debuggee.wait(2.0)
        debuggee.wait_output(1.0)
        app.post_message(Disconnected(code))

    def send(self, message: dict[str, Any]) -> bool:
        channel = self.debuggee.channel if self.debuggee is not None else None
        return channel.send(message) if channel is not None else False

    def write_stdin(self, text: str) -> bool:
        return self.debuggee.write_stdin(text) if self.debuggee is not None else False

    def close_stdin(self) -> None:
        if self.debuggee is not None:
            self.debuggee.close_stdin()

    def close(self) -> None:
        if self.debuggee is not None:
            self.debuggee.close()

    def returncode(self) -> int | None:
        return self.debuggee.poll() if self.debuggee is not None else None
