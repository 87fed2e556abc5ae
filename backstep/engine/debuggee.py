"""The child process of ``backstep run``: runs the script under the engine and serves the UI.

Started as ``python -m backstep.engine.debuggee [--no-source] -- script.py args...`` with
BACKSTEP_SOCKET and BACKSTEP_TOKEN_FD set (the token comes through that inherited fd, never the
environment; see ``transport``). It connects, announces the session, waits for ``start``,
runs the script like python, and answers commands while paused. If the UI goes away, it stops
pausing and lets the script run to its end, its output moved to the UI's terminal
(``outlive``). The script's stdin reads tell the UI to offer a line (``input_wait``); forked
children of the script let go of all of it (``forks``).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from backstep import protocol
from backstep.events.commands import validate_command
from backstep.process import transport

T = TypeVar("T")


class _ChannelLines:
    """The file-like end of the channel a ``JsonlRecorder`` writes batches into."""

    def __init__(self, send: Callable[[bytes], bool]) -> None:
        self.send = send

    def write(self, data: bytes) -> None:
        if data and not self.send(data):
            raise BrokenPipeError("the UI is gone")

    def flush(self) -> None:
        pass


class ChannelSink:
    """Events to the UI; a lost UI makes every later emit a no-op.

    A recorded pass hands its node events over a few hundred at a time (``emit_many``): they
    are encoded as ``backstep trace`` writes them (each gradient summary's text once) and sent
    in one write, not one ``json.dumps`` and one ``sendall`` per node; single events are written
    by the same recorder, in the same form (``events/form``). ``queued``: they leave
    through an ``Outbox`` thread, and ``flush`` waits until they are out.
    """

    def __init__(self, channel: transport.Channel, queued: bool = False) -> None:
        from backstep.engine.recorder import JsonlRecorder

        self.channel = channel
        self.outbox = None
        send = channel.send_lines
        if queued:
            from backstep.process.outbox import Outbox

            self.outbox = Outbox(channel)
            send = self.outbox.put
        self._send = send
        self._batches = JsonlRecorder(_ChannelLines(send))  # type: ignore[arg-type]

    def emit(self, event: dict[str, Any]) -> None:
        # as a trace file has it too: a pass_begin goes out as the text its listing was written
        # in (json.dumps of a 6,380-node one again was 0.05 s between a backward and its stop)
        self._batches.emit(event)

    def emit_many(self, events: list[dict[str, Any]]) -> None:
        self._batches.emit_many(events)

    def flush(self) -> None:
        if self.outbox is not None:
            self.outbox.drain()


def wait_for_start(channel: transport.Channel, make: Callable[[dict[str, Any]], T]) -> T | None:
    """What ``make`` builds from the UI's ``start`` command (None if the UI left first).
    Anything else, or a ``start`` whose content ``make`` refuses for any reason, gets an error
    reply and the wait goes on: no message can crash the debuggee before the script runs."""
    for message in channel.incoming():
        try:
            validate_command(message)
            if message["cmd"] != "start":
                raise protocol.ProtocolError("waiting for 'start'")
            return make(message)
        except Exception as exc:  # noqa: BLE001 - one bad command must not end the session
            channel.send(protocol.error_event(protocol.describe(exc)))
    return None


def _read_commands(channel: transport.Channel, controller: Any, outlive: Any = None,
                   aborted: threading.Event | None = None) -> None:
    """Feed the UI's commands to the controller (which answers a bad one with an error, never
    raising); however this ends, the controller closes, so no pause outlives its UI. If the UI
    goes away without quitting (it was killed), the script's output moves off its pipes before
    any pause is released. ``aborted`` is set when the UI quits mid-run (``q``: ``abort``)."""
    quitting = False
    try:
        for message in channel.incoming():
            if isinstance(message, dict) and message.get("cmd") in ("abort", "detach"):
                quitting = True
                if message.get("cmd") == "abort" and aborted is not None:
                    aborted.set()
            controller.feed(message)
    finally:
        if not quitting and outlive is not None:
            outlive.ui_gone()
        controller.close()


def _forked(channel: transport.Channel, outlive: Any, stdin: Any) -> None:
    """In a forked child: never a word to the UI, and the parent keeps the output pipes."""
    if stdin is not None:
        stdin.notice = None
    channel.abandon()
    if outlive is not None:
        outlive.forget()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="backstep-debuggee")
    parser.add_argument("--no-source", action="store_true")
    parser.add_argument("--module", action="store_true")  # the script is a module: python -m
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:  # the variables leave os.environ: the script and its children never see them
        address = transport.address_from_environment()
        if address is None:
            print(f"backstep: the debuggee needs {transport.ENV_SOCKET} and "
                  f"{transport.ENV_TOKEN_FD} from the UI", file=sys.stderr)
            return 2
        from backstep.process.outlive import Outlive

        outlive = Outlive.from_environment()
        channel = transport.connect(*address, max_line=protocol.MAX_COMMAND_LINE)
    except OSError as exc:
        print(f"backstep: cannot reach the UI: {exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        pass

    from backstep.engine.controller import Controller
    from backstep.engine.runner import run_module, run_script
    from backstep.engine.session import Session, refuse_missing, session_event

    sink = ChannelSink(channel, queued=True)  # the script never waits on the UI's reader
    sink.emit(session_event(["-m"] * args.module + [args.script, *args.args]))
    controller = wait_for_start(channel, lambda start: Controller(
        sink.emit, start.get("breakpoints") or [], start.get("stop_at_pass_start", True)))
    if controller is None:
        return 1
    missing = None if args.module else refuse_missing(args.script, "backstep run", sink)
    if missing is not None:
        channel.close()
        return missing
    aborted = threading.Event()
    reader = threading.Thread(target=_read_commands,
                              args=(channel, controller, outlive, aborted),
                              name="backstep-commands", daemon=True)
    reader.start()

    from backstep.process import input_wait

    stdin = input_wait.install(sink.emit)  # the console offers a line when the script waits
    session = Session(sink, controller, record=False, source=not args.no_source,
                      on_fork=lambda: _forked(channel, outlive, stdin))
    with session:
        run = run_module if args.module else run_script
        code = run(args.script, args.args, on_exit=session.exit)
    if outlive is not None:
        outlive.settle()  # our own hang-up below is not the UI dying
    channel.close()  # a no-op in a fork: the parent's connection stays up
    if aborted.is_set():  # q aborted the script: end without the teardown the UI waits on
        import signal

        from backstep.process.quick_exit import end_process

        # the code a shell reports for a script ended by SIGTERM (143), as the README says:
        # not the 1 of the abort's traceback, which reads as the script's own failure
        end_process(128 + signal.SIGTERM)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
