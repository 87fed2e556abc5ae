"""``attach(listen="[HOST:]PORT")`` (or BACKSTEP_LISTEN): no UI here; one attaches over TCP.

The engine is armed in this process with a controller that stops only while a remote UI is
attached (``remote.RemoteServer``). ``attach`` prints the address and token on stderr and, by
default, waits there for the first UI, like ``debugpy.wait_for_client()``: the next pass is
never missed. The script's own output stays on its terminal or log, untouched (a copy of
what it prints goes to the attached UI: ``remote_output``).
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

from backstep.process.attach.base import Attachment
from backstep.process.listen import in_pass
from backstep.process.remote import RemoteServer, parse_address


class RemoteAttachment(Attachment):
    """A TCP server for remote UIs, the engine armed behind it."""

    def __init__(self, listen: str, breakpoints: list[dict[str, Any]], stop_at_pass_start: bool,
                 source: bool, wait: bool) -> None:
        super().__init__(source)
        self.address = parse_address(listen)  # ValueError before anything is armed
        self.breakpoints = breakpoints
        self.stop_at_pass_start = stop_at_pass_start
        self.wait = wait
        self.server: RemoteServer | None = None
        self._restore_output: Any = None

    def start(self) -> None:
        from backstep.engine.controller import Controller
        from backstep.engine.session import session_event

        self.server = RemoteServer(self.address, session_event(list(sys.argv)),
                                   busy=lambda: in_pass(self.capture))
        controller = Controller(self.server.emit, self.breakpoints, self.stop_at_pass_start)
        controller.close()  # no UI yet: nothing stops
        self.server.serve(controller)
        self._arm(self.server, controller, record=False)
        from backstep.process import remote_output

        self._restore_output = remote_output.install(self._emit, self._attached)
        self._announce(self.server)
        atexit.register(self._at_exit)
        if self.wait:
            try:
                self.server.wait_for_ui()
            except KeyboardInterrupt:  # ctrl-c while waiting: the script gets it, unarmed
                self.stop()
                raise

    def _announce(self, server: RemoteServer) -> None:
        """Say where a UI can attach (``attach_served``: serve one to a browser instead)."""
        print(server.announcement(self.wait), file=sys.stderr, flush=True)
        exposed = server.exposure()
        if exposed is not None:
            print(exposed, file=sys.stderr, flush=True)

    def _emit(self, event: dict[str, Any]) -> None:
        server = self.server
        if server is not None:
            server.emit(event)

    def _attached(self) -> bool:
        server = self.server
        return server is not None and server.channel is not None

    def _at_exit(self) -> None:
        """The script is ending: the attached UI learns it (0 for a clean end: ``sys.exit``'s
        code is not visible to atexit handlers), then its stream ends."""
        server = self.server
        if server is not None and server.channel is not None:
            code = 1 if getattr(sys, "last_value", None) is not None else 0
            if self.diagnostician is not None:
                self.diagnostician.finish()
            server.emit(self.exit_event(code))
        self.stop()

    def stop(self) -> None:
        atexit.unregister(self._at_exit)
        restore, self._restore_output = self._restore_output, None
        if restore is not None:
            restore()
        server, self.server = self.server, None
        if server is not None:
            server.close()
        self._disarm()

    def _abandon(self) -> None:
        atexit.unregister(self._at_exit)
        server, self.server = self.server, None
        if server is not None:
            server.forget()
