"""A remote server on a free loopback port and the token it proves, for tests of the remote
UI's port."""

from __future__ import annotations

from backstep.engine.controller import Controller
from backstep.process import auth, remote

TOKEN = auth.new_token()


def listening(logs: list[str]) -> tuple[remote.RemoteServer, Controller, tuple[str, int]]:
    """A server on a free loopback port, serving a closed controller, logging into ``logs``."""
    controller = Controller(lambda event: None)
    controller.close()
    server = remote.RemoteServer(("127.0.0.1", 0), {"event": "session"}, token=TOKEN,
                                 log=logs.append)
    server.serve(controller)
    host, port = server.address.rsplit(":", 1)
    return server, controller, (host, int(port))
