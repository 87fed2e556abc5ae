"""The UI child of ``backstep.attach()``: the same app as ``backstep run``, other plumbing.

Started by the user's process as
``python -m backstep.process.attach.ui --console R1,R2 --options JSON``
with BACKSTEP_SOCKET/BACKSTEP_TOKEN_FD set (``transport.Listener.handoff``), on the user's
terminal. It connects to the script, sends ``start`` with the options ``attach()`` was given, shows the script's output read from the
console pipes R1 (stdout) and R2 (stderr), and on quit tells the script to detach. Never imports
torch.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from backstep.process import transport

if TYPE_CHECKING:
    from backstep.tui.runtime.link import LinkedApp


def pump(fd: int, name: str, app: LinkedApp) -> None:
    """Forward one console pipe to the app as it is written, until EOF."""
    from backstep.tui.messages import ConsoleOutput

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        text = decoder.decode(chunk, final=not chunk)
        if text:
            app.post_message(ConsoleOutput(text, name))
        if not chunk:
            return


class AttachLink:
    """The app's way back to the script that attached it."""

    def __init__(self, console: list[int], address: tuple[str, str] | None) -> None:
        self.console = console
        self.address = address
        self.channel: transport.Channel | None = None

    def open(self, app: LinkedApp) -> None:
        for fd, name in zip(self.console, ("stdout", "stderr"), strict=False):
            threading.Thread(target=pump, args=(fd, name, app), name=f"backstep-{name}",
                             daemon=True).start()
        threading.Thread(target=self._serve, args=(app,), name="backstep-link",
                         daemon=True).start()

    def _serve(self, app: LinkedApp) -> None:
        from backstep.tui.messages import Disconnected, ServerError

        try:
            if self.address is None:
                raise OSError(f"{transport.ENV_SOCKET} and {transport.ENV_TOKEN_FD} are not set")
            self.channel = transport.connect(*self.address)
        except OSError as exc:
            app.post_message(ServerError(f"could not reach the script: {exc}"))
            app.post_message(Disconnected(None))
            return
        self.channel.shown = True  # its strings reach the screen: made printable as they arrive
        self.channel.send(app.start_message())
        app.reader.run(self.channel)
        app.post_message(Disconnected(None))

    def send(self, message: dict[str, Any]) -> bool:
        return self.channel.send(message) if self.channel is not None else False

    quit_help = "quit: close the UI; the script runs on, its output back on the terminal"
    stdin_reopens = True  # ctrl+d ends one read: the terminal goes on after it

    def write_stdin(self, text: str) -> bool:
        """A line typed in the console, for the script's stdin while this UI is up."""
        return self.send({"cmd": "stdin", "data": text})

    def close_stdin(self) -> None:
        self.send({"cmd": "stdin", "data": ""})

    def close(self) -> None:
        if self.channel is not None:
            self.channel.send({"cmd": "detach"})
            self.channel.close()

    def returncode(self) -> int | None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backstep-attach-ui")
    parser.add_argument("--console", default="", help="read ends of the stdout,stderr pipes")
    parser.add_argument("--options", default="{}", help="attach() options as JSON")
    args = parser.parse_args(argv)
    try:  # read the token first thing: its fd and variables are gone from here on
        address = transport.address_from_environment()
    except OSError:
        address = None
    options = json.loads(args.options)
    console = [int(fd) for fd in args.console.split(",") if fd]
    from backstep.tui.app import BackstepApp
    from backstep.tui.runtime.live_driver import LiveDriver

    link = AttachLink(console, address)
    app = BackstepApp(LiveDriver(link), breakpoints=list(options.get("breakpoints", [])),
                      stop_at_pass_start=bool(options.get("stop_at_pass_start", True)),
                      source=bool(options.get("source", True)))
    try:
        app.run()
        # what the script printed while the UI was up, left on the terminal as ``backstep
        # run`` leaves it, before the script (released by the detach below) prints on
        from backstep.tui.runtime.leave_output import leave_output

        leave_output(app.console_lines, sys.stdout)
    finally:
        link.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
