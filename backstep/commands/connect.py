"""``backstep connect HOST:PORT``: the UI for a script that waits for one over TCP
(``backstep run --listen``, ``backstep.attach(listen=...)``).

The token comes from ``--token``, or BACKSTEP_TOKEN (better: a command line is visible to
every user of the machine in ``ps``), or a prompt. It never crosses the wire: see
``process.auth``. A refusal (wrong token, another UI attached, nothing there) is one line on
stderr and exit status 2, before any screen is drawn. ``q`` detaches: the script runs on, and
another ``connect`` can attach later. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from backstep import protocol
from backstep.events.breakpoints import parse_breakpoint, validate_breakpoints

if TYPE_CHECKING:
    from backstep.process.channel import Channel
    from backstep.tui.runtime.link import LinkedApp


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "connect",
        help="open the UI for a script waiting with --listen (on this or another machine)",
        description="Attach the UI to a script started with `backstep run --listen` or "
        "`backstep.attach(listen=...)`. Quitting detaches: the script runs on.",
    )
    parser.add_argument("address", metavar="[HOST:]PORT",
                        help="where the script listens (HOST defaults to 127.0.0.1)")
    parser.add_argument("--token", default=None,
                        help="the token the script printed (default: $BACKSTEP_TOKEN, "
                        "else a prompt)")
    parser.add_argument(
        "--break", dest="breakpoints", action="append", default=[], metavar="SPEC",
        help="stop at a condition: MulBackward*, node:GLOB, module:GLOB, leaf:NAME, nonfinite, "
        "norm:VALUE (repeatable)")
    parser.add_argument("--breakpoints-json", default="[]", help=argparse.SUPPRESS)  # attach()'s
    parser.add_argument("--no-stop-at-start", action="store_true",
                        help="do not stop at the first node of every pass (only at breakpoints)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the connection and the handshake")
    parser.set_defaults(handler=main)
    return parser


REASON = 200  # characters of a refusal's reason shown (the peer chose them)


class RemoteLink:
    """The app's way to a script over an authenticated TCP channel."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        channel.shown = True  # a peer's strings reach the screen: made printable as they arrive

    def open(self, app: LinkedApp) -> None:
        threading.Thread(target=self._serve, args=(app,), name="backstep-link",
                         daemon=True).start()

    def _serve(self, app: LinkedApp) -> None:
        from backstep.tui.messages import Disconnected

        self.channel.send(app.start_message())
        app.reader.run(_Events(self.channel, app))
        app.post_message(Disconnected(None))

    def send(self, message: dict[str, Any]) -> bool:
        return self.channel.send(message)

    def close(self) -> None:
        """Detach: the script is released and runs on."""
        self.channel.send({"cmd": "detach"})
        self.channel.close()

    def returncode(self) -> int | None:
        return None


class _Events:
    """The channel as the reader sees it, less the ``output`` events: a copy of the script's
    prints, which go to the console panel."""

    def __init__(self, channel: Channel, app: LinkedApp) -> None:
        self.channel = channel
        self.app = app

    def receive(self) -> dict[str, Any] | None:
        from backstep.tui.messages import ConsoleOutput

        while True:
            event = self.channel.receive()
            if event is None or event.get("event") != "output":
                return event
            text = event.get("text")
            if isinstance(text, str):
                stream = "stderr" if event.get("stream") == "stderr" else "stdout"
                text = text.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
                self.app.post_message(ConsoleOutput(text, stream))


def _token(given: str | None) -> str | None:
    token = given or os.environ.get("BACKSTEP_TOKEN")
    if not token and sys.stdin.isatty():
        import getpass

        try:
            token = getpass.getpass("backstep token: ")
        except (EOFError, KeyboardInterrupt):
            return None
    return token.strip() if token else None


def main(args: argparse.Namespace) -> int:
    from backstep import safe_text
    from backstep.commands import say
    from backstep.process import auth, remote

    try:
        breakpoints = [parse_breakpoint(spec) for spec in args.breakpoints]
        breakpoints += validate_breakpoints(json.loads(args.breakpoints_json))
        address = remote.parse_address(args.address)
    except (protocol.ProtocolError, ValueError) as exc:  # JSONDecodeError is a ValueError
        print(f"backstep connect: {exc}", file=sys.stderr)
        return 2
    token = _token(args.token)
    if not token:
        print("backstep connect: no token (give --token T or set BACKSTEP_TOKEN; the script "
              "printed it when it started listening)", file=sys.stderr)
        return 2
    where = remote.format_address(*address)
    try:
        channel = remote.connect(address, token, timeout=args.timeout)
    except auth.HandshakeError as exc:  # maybe the words of whoever answers there, token or not
        reason = safe_text.printable(str(exc))  # cut as shown, escapes and all
        say("connect", f"{where}: {reason[:REASON] + '…' if len(reason) > REASON else reason}")
        return 2
    except OSError as exc:
        say("connect", f"cannot reach {where}: {exc.strerror or exc}")
        return 2
    from backstep.tui.app import BackstepApp
    from backstep.tui.runtime.hangup import HangUp
    from backstep.tui.runtime.live_driver import LiveDriver

    link = RemoteLink(channel)
    app = BackstepApp(LiveDriver(link), breakpoints=breakpoints,
                      stop_at_pass_start=not args.no_stop_at_start)
    with HangUp(app) as hang_up:  # ended by a signal: the terminal restored, the link closed
        try:
            result = app.run()
        finally:
            link.close()
    if hang_up.code is not None:
        return hang_up.code
    if app.return_code:  # the UI crashed (its traceback is printed): not a clean detach
        return app.return_code
    return int(result) if result is not None else 0
