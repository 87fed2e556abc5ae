"""The real Link: a debuggee child process behind a private socket.

``open`` (called when the app is mounted) starts the child, forwards its output to the console
panel, and on a background thread waits for it to connect, sends ``start`` and runs the reader.
``close`` ends the child for good; ``launch`` calls it again after the app returns, so a crash
of the UI still leaves no orphan.
"""

from __future__ import annotations

import threading
from typing import Any

from backstep.process.launcher import Debuggee
from backstep.tui.messages import ConsoleOutput, Disconnected, ServerError
from backstep.tui.runtime.link import LinkedApp


class LiveLink:
    """Runs ``argv`` as the debuggee and connects it to the app."""

    def __init__(self, argv: list[str], connect_timeout: float = 60.0) -> None:
        self.argv = argv
        self.connect_timeout = connect_timeout
        self.debuggee: Debuggee | None = None
        self.thread: threading.Thread | None = None

    def open(self, app: LinkedApp) -> None:
        def output(text: str, stream: str) -> None:
            app.post_message(ConsoleOutput(text, stream))

        self.debuggee = Debuggee(self.argv, on_output=output)
        try:
            self.debuggee.start()
        except OSError as exc:
            app.post_message(ServerError(f"could not start the debuggee: {exc}"))
            app.post_message(Disconnected(None))
            return
        self.thread = threading.Thread(target=self._serve, args=(app,), name="backstep-link",
                                       daemon=True)
        self.thread.start()

    def _serve(self, app: LinkedApp) -> None:
        debuggee = self.debuggee
        assert debuggee is not None
        channel = debuggee.accept(self.connect_timeout)
        if channel is None:
            code = debuggee.wait(2.0)
            debuggee.wait_output(1.0)
            if code is None:
                app.post_message(ServerError("the debuggee did not connect in time"))
            app.post_message(Disconnected(code))
            return
        channel.shown = True  # its strings reach the screen: made printable as they arrive
        channel.send(app.start_message())
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
