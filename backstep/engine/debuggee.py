"""The child process of ``backstep run``: runs the script under the engine and serves the UI.

Started as ``python -m backstep.engine.debuggee [--no-source] -- script.py args...`` with
BACKSTEP_SOCKET and BACKSTEP_TOKEN_FD set (the token comes through that inherited fd, never the
environment; see ``transport``). It connects, announces the session, waits for ``start``,
runs the script like python, and answers commands while paused. If the UI goes away, it stops
pausing and lets the script run to its end.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from backstep import protocol, transport

T = TypeVar("T")


class ChannelSink:
    """Events to the UI; a lost UI makes every later emit a no-op."""

    def __init__(self, channel: transport.Channel) -> None:
        self.channel = channel

    def emit(self, event: dict[str, Any]) -> None:
        self.channel.send(event)

    def flush(self) -> None:
        pass


def _wait_for_start(channel: transport.Channel, make: Callable[[dict[str, Any]], T]) -> T | None:
    """What ``make`` builds from the UI's ``start`` command (None if the UI left first).
    Anything else, or a ``start`` whose content ``make`` refuses for any reason, gets an error
    reply and the wait goes on: no message can crash the debuggee before the script runs."""
    for message in channel.incoming():
        try:
            protocol.validate_command(message)
            if message["cmd"] != "start":
                raise protocol.ProtocolError("waiting for 'start'")
            return make(message)
        except Exception as exc:  # noqa: BLE001 - one bad command must not end the session
            channel.send(protocol.error_event(protocol.describe(exc)))
    return None


def _read_commands(channel: transport.Channel, controller: Any) -> None:
    """Feed commands to the controller (which answers a bad one with an error, never raising);
    however this ends, the controller closes, so no pause outlives its UI."""
    try:
        for message in channel.incoming():
            controller.feed(message)
    finally:
        controller.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backstep-debuggee")
    parser.add_argument("--no-source", action="store_true")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:  # the variables leave os.environ: the script and its children never see them
        address = transport.address_from_environment()
        if address is None:
            print(f"backstep: the debuggee needs {transport.ENV_SOCKET} and "
                  f"{transport.ENV_TOKEN_FD} from the UI", file=sys.stderr)
            return 2
        channel = transport.connect(*address, max_line=protocol.MAX_COMMAND_LINE)
    except OSError as exc:
        print(f"backstep: cannot reach the UI: {exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        pass

    from backstep.engine.controller import Controller
    from backstep.engine.runner import run_script
    from backstep.engine.session import Session, refuse_missing, session_event

    sink = ChannelSink(channel)
    sink.emit(session_event([args.script, *args.args]))
    controller = _wait_for_start(channel, lambda start: Controller(
        sink.emit, start.get("breakpoints") or [], start.get("stop_at_pass_start", True)))
    if controller is None:
        return 1
    missing = refuse_missing(args.script, "backstep run", sink)
    if missing is not None:
        channel.close()
        return missing
    reader = threading.Thread(target=_read_commands, args=(channel, controller),
                              name="backstep-commands", daemon=True)
    reader.start()

    def on_exit(code: int, traceback: str | None) -> None:
        sink.emit({"event": "exit", "code": code, "traceback": traceback})

    with Session(sink, controller, record=False, source=not args.no_source):
        code = run_script(args.script, args.args, on_exit=on_exit)
    channel.close()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
