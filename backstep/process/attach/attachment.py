"""``backstep.attach()``: arm the debugger from inside a running script.

The user's process is the debuggee. ``attach`` returns at once; the next backward pass stops
inside a backward hook. The UI runs as a child process on the same terminal (Textual needs its own
main thread), and while it is up the script's fds 1 and 2 — C-level writes included — go through
pipes to its console panel. When the person quits, or the UI dies, or its terminal closes, the
hooks are removed, the fds restored (with anything the UI had not shown yet), and the script runs
on undisturbed. With no terminal, ``attach`` says so in one line and lets the script run; with
``trace=`` (or BACKSTEP_TRACE) it records a trace instead of opening the UI.

Nothing here imports torch until a UI or a trace is actually armed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from backstep import protocol
from backstep.engine.torch_api import check_imported
from backstep.process import launcher, transport

_lock = threading.RLock()
_current: _Attachment | None = None
_torch_warned = False  # a torch backstep cannot use is named once, however often attach() runs
CONNECT_TIMEOUT = 30.0
# then --console R1,R2 --options JSON
UI_COMMAND = launcher.module_command("backstep.process.attach_ui")


def attach(
    *,
    breakpoints: Sequence[dict[str, Any] | str] = (),
    stop_at_pass_start: bool = True,
    source: bool = True,
    trace: str | None = None,
    listen: str | None = None,
    wait: bool = True,
    serve: str | None = None,
    eager: bool = False,
) -> None:
    """Arm backstep in this process; harmless when it is already armed.

    ``breakpoints`` take the dict form of ``protocol`` or the command-line form
    (``"MulBackward*"``, ``"module:model.encoder.*"``, ``"nonfinite"``, ``"norm:1e3"``).
    ``listen="[HOST:]PORT"`` (or BACKSTEP_LISTEN) opens no UI here: a remote one attaches with
    ``backstep connect``; ``wait`` makes this call wait for the first one. In a Jupyter kernel
    the UI is served to the browser and shown in the cell; ``serve="[HOST:]PORT"`` (or
    BACKSTEP_SERVE) serves it from anywhere, on that address (default: 127.0.0.1, any port).
    ``eager`` turns torch.compile off from here on (code compiled before is dropped), as
    ``--eager`` does.
    """
    global _current, _torch_warned
    from backstep.process.forks import in_multiprocessing_child

    if in_multiprocessing_child():  # a spawned worker importing the script's top level
        return
    with _lock:
        if _current is not None and _current.active:
            return
        parsed = [protocol.parse_breakpoint(b) if isinstance(b, str) else b for b in breakpoints]
        protocol.validate_breakpoints(parsed)
        trace = trace or os.environ.get("BACKSTEP_TRACE") or None
        listen = listen or os.environ.get("BACKSTEP_LISTEN") or None
        if trace:
            from backstep.process.attach_trace import _TraceAttachment

            _current = _TraceAttachment(trace, source)
        elif listen:
            from backstep.process.attach_remote import _RemoteAttachment

            try:
                _current = _RemoteAttachment(listen, parsed, stop_at_pass_start, source, wait)
            except ValueError as exc:
                print(f"backstep: listen={listen!r}: {exc} (the script continues without "
                      "backstep)", file=sys.stderr)
                return
        elif serve or os.environ.get("BACKSTEP_SERVE") or _in_notebook():
            from backstep.process.attach_served import _ServedAttachment

            try:
                _current = _ServedAttachment(parsed, stop_at_pass_start, source, serve)
            except ValueError as exc:
                print(f"backstep: {exc} (the script continues without backstep)",
                      file=sys.stderr)
                return
        elif not (os.isatty(0) and os.isatty(1)):
            print("backstep: no terminal to open the debugger on; the script continues without it "
                  "(set BACKSTEP_TRACE=run.jsonl to record a trace instead)", file=sys.stderr)
            return
        else:
            _current = _UIAttachment(parsed, stop_at_pass_start, source)
        problem = check_imported()  # before anything is armed: the script runs untouched
        if problem is not None:
            _current = None
            if not _torch_warned:
                _torch_warned = True
                print(f"{problem} (the script continues without backstep)", file=sys.stderr)
            return
        if eager:
            from backstep.engine.compiled import eager as eager_mode

            eager_mode.apply()
        try:
            _current.start()
        except Exception as exc:  # noqa: BLE001 - attaching must never break the script
            print(f"backstep: could not attach: {exc}", file=sys.stderr)
            _current.stop()
            _current = None


def _in_notebook() -> bool:
    from backstep.process.notebook_cell import in_notebook

    return in_notebook()


def detach() -> None:
    """Disarm: hooks removed, fds restored, the UI closed."""
    with _lock:
        if _current is not None:
            _current.stop()


@contextlib.contextmanager
def attached(**options: Any) -> Iterator[None]:
    """Arm backstep for the ``with`` block only."""
    attach(**options)
    try:
        yield
    finally:
        detach()


class _Attachment:
    """Capture and provenance installed in this process for as long as it is active."""

    def __init__(self, source: bool) -> None:
        self.source = source
        self.active = False
        self.capture: Any = None
        self.provenance: Any = None
        self.diagnostician: Any = None
        self._unfork: Any = None

    def _arm(self, sink: Any, controller: Any, record: bool) -> None:
        from backstep.engine.capture import Capture
        from backstep.engine.diagnostics import Diagnostician
        from backstep.process import forks

        self._unfork = forks.on_fork_child(self._after_fork)

        self.diagnostician = Diagnostician(sink)
        self.diagnostician.install()
        self.capture = Capture(self.diagnostician, controller, record=record)
        self.capture.install()
        if self.source:
            from backstep.engine.provenance import Provenance, annotate

            self.provenance = Provenance()
            self.provenance.install()
            self.capture.annotate = annotate
        self.active = True

    def _after_fork(self) -> None:
        """In a forked child (a DataLoader worker...): disarm without a word to the UI or the
        trace, forget the parent's UI and files, and let a later attach() start afresh."""
        global _current, _lock
        _lock = threading.RLock()  # a parent thread may have held it at fork time
        _current = None
        self._unfork = None
        if self.capture is not None:
            self.capture.sink = self.capture.controller = None
            self.capture._released_queue = []
        self._disarm()
        self._abandon()

    def _abandon(self) -> None:
        """Let go of what the parent owns, without flushing, shutting down or locking."""

    def _disarm(self) -> None:
        self.active = False
        if self._unfork is not None:
            self._unfork()
            self._unfork = None
        if self.provenance is not None:
            self.provenance.uninstall()
            self.provenance = None
        if self.capture is not None:
            self.capture.uninstall()
            self.capture = None
        if self.diagnostician is not None:
            self.diagnostician.uninstall()
            self.diagnostician = None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class _UIAttachment(_Attachment):
    """The live UI in a child process on this terminal, console pipes in between."""

    def __init__(self, breakpoints: list[dict[str, Any]], stop_at_pass_start: bool,
                 source: bool) -> None:
        super().__init__(source)
        self.breakpoints = breakpoints
        self.stop_at_pass_start = stop_at_pass_start
        self.listener: transport.Listener | None = None
        self.channel: transport.Channel | None = None
        self.process: subprocess.Popen | None = None
        self.controller: Any = None
        self.saved_fds: dict[int, int] = {}  # fd -> a duplicate of what it was before
        self.pipes: dict[int, tuple[int, int]] = {}  # fd -> (read end, write end)
        self._restore_lock = threading.Lock()
        self.terminal: list[Any] | None = None  # fd 0's terminal modes before the UI came up
        self._stdin_lines: queue.Queue[str | None] = queue.Queue()  # typed in the console
        self._stdin: Any = None  # the RoutedStdin standing in for sys.stdin while the UI is up

    def start(self) -> None:
        try:
            self.terminal = termios.tcgetattr(0)
        except (termios.error, OSError):
            self.terminal = None
        self.listener = transport.Listener(max_line=protocol.MAX_COMMAND_LINE)
        for fd in (1, 2):
            self.pipes[fd] = os.pipe()
        read_ends = [self.pipes[1][0], self.pipes[2][0]]
        self.saved_fds = {fd: os.dup(fd) for fd in (1, 2)}
        options = {"breakpoints": self.breakpoints, "stop_at_pass_start": self.stop_at_pass_start,
                   "source": self.source}
        env = {**os.environ, **self.listener.handoff()}  # the token goes through a pipe
        self.process = process = subprocess.Popen(
            [*UI_COMMAND, "--console", f"{read_ends[0]},{read_ends[1]}",
             "--options", json.dumps(options)],
            stdin=0, stdout=self.saved_fds[1], stderr=self.saved_fds[2],
            pass_fds=(*read_ends, *self.listener.pass_fds), env=env,
        )
        self.listener.handed_off()
        # a UI that dies at startup is noticed at once, not after CONNECT_TIMEOUT
        self.channel = self.listener.accept(CONNECT_TIMEOUT,
                                            give_up=lambda: process.poll() is not None)
        if self.channel is None:
            code = process.poll()
            raise RuntimeError(f"the debugger UI did not connect in {CONNECT_TIMEOUT:g} s"
                               if code is None else f"the debugger UI exited at startup "
                               f"(code {launcher.exit_status(code)})")
        from backstep.engine.controller import Controller
        from backstep.engine.debuggee import ChannelSink, _wait_for_start
        from backstep.engine.session import session_event

        sink = ChannelSink(self.channel)
        self.controller = _wait_for_start(self.channel, lambda start: Controller(
            sink.emit, start.get("breakpoints") or [], start.get("stop_at_pass_start", True)))
        if self.controller is None:
            raise RuntimeError("the debugger UI closed before it started")
        sink.emit(session_event(list(sys.argv)))
        self._arm(sink, self.controller, record=False)
        self._redirect()
        self._route_stdin()
        threading.Thread(target=self._serve, name="backstep-attach", daemon=True).start()
        atexit.register(self._at_exit)

    def _redirect(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, (_, write_end) in self.pipes.items():
            os.dup2(write_end, fd)
            os.close(write_end)

    def _route_stdin(self) -> None:
        """While the UI owns the terminal, the script's stdin reads take the console's lines."""
        from backstep.process.input_wait import RoutedStdin

        self._stdin = RoutedStdin(sys.stdin, self._stdin_line)
        sys.stdin = self._stdin

    def _unroute_stdin(self) -> None:
        """The terminal is the script's again: a read waiting for the console reads it."""
        if self._stdin is not None:
            if sys.stdin is self._stdin:
                sys.stdin = self._stdin._original
            self._stdin = None
            self._stdin_lines.put(None)

    def _stdin_line(self) -> str | None:
        """The next line typed in the console ("" for ctrl+d); None once the UI is gone."""
        channel = self.channel
        if channel is None or self._stdin is None:
            return None
        channel.send({"event": "input"})
        return self._stdin_lines.get()

    def _serve(self) -> None:
        """Feed the UI's commands to the controller until it leaves. Its ``detach`` is not
        passed on: releasing the paused script must wait until the UI has given the terminal
        back and fds 1 and 2 are restored, which ``stop`` does in that order."""
        channel = self.channel
        assert channel is not None
        try:  # feed() answers a bad command with an error; whatever ends this, stop() runs
            for message in channel.incoming():
                if message.get("cmd") == "detach":
                    break
                if message.get("cmd") == "stdin":  # a line for the script, not the controller
                    data = message.get("data")
                    self._stdin_lines.put(data if isinstance(data, str) else "")
                    continue
                self.controller.feed(message)
        finally:
            self.stop()

    def stop(self) -> None:
        """Restore everything; safe from any thread, any number of times."""
        with self._restore_lock:
            # the UI first: the script (and a later attach's UI) may use the terminal only once
            # this UI has let go of it
            self._end_ui()
            # then the fds: once the paused script is released, everything it prints must reach
            # the terminal, not a pipe that the exiting UI may still be reading
            self._restore_fds()
            self._unroute_stdin()
            if self.controller is not None:
                self.controller.close()
            self._disarm()
            if self.channel is not None:
                self.channel.close()
                self.channel = None
            if self.listener is not None:
                self.listener.close()
                self.listener = None

    def _abandon(self) -> None:
        """The fork's fds 1 and 2 stay on the console pipe, as its parent's are: its output
        shows in the UI while that is up."""
        atexit.unregister(self._at_exit)
        if self._stdin is not None and sys.stdin is self._stdin:
            sys.stdin = self._stdin._original
        self._stdin = None
        self.process = None  # not this process's child
        self.controller = None
        if self.channel is not None:
            self.channel.abandon()
            self.channel = None
        if self.listener is not None:  # the socket only: the directory is the parent's
            with contextlib.suppress(OSError):
                self.listener.server.close()
            self.listener = None
        for fd in [*self.saved_fds.values(), *(read for read, _ in self.pipes.values())]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.saved_fds = {}
        self.pipes = {}
        self.terminal = None

    def _end_ui(self) -> None:
        """Wait for the UI to leave (end it if the script detaches on its own), then put the
        terminal back as it was, whatever state a UI that died left it in."""
        process = self.process
        if process is None:
            return
        self.process = None
        if process.poll() is None:
            if threading.current_thread() is threading.main_thread():
                process.terminate()  # detach() from the script itself
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.terminal is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(0, termios.TCSADRAIN, self.terminal)
        if process.returncode != 0 and self.saved_fds:
            # leave the alternate screen, show the cursor, stop mouse reporting
            with contextlib.suppress(OSError):
                os.write(self.saved_fds[1], b"\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1003l"
                                            b"\x1b[?1006l\x1b[?2004l\r\n")

    def _restore_fds(self) -> None:
        if not self.saved_fds:
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, saved in self.saved_fds.items():
            os.dup2(saved, fd)
        # what the script wrote that the UI never showed still reaches the terminal, and so
        # does what forked children (still on the pipes) write later, until they let go
        from backstep.process.outlive import drain, forward_in_background

        for fd, (read_end, _) in self.pipes.items():
            drain(read_end, fd)
            forward_in_background(read_end, fd)
        for saved in self.saved_fds.values():
            with contextlib.suppress(OSError):
                os.close(saved)
        self.saved_fds = {}
        self.pipes = {}

    def _at_exit(self) -> None:
        """The script is ending with the UI still up: let the person read it, then restore."""
        channel, process = self.channel, self.process
        if channel is not None and process is not None and process.poll() is None:
            # an uncaught exception has been printed and left in sys.last_value by now;
            # sys.exit(N)'s N is not visible to atexit handlers, so a clean end reads as 0
            code = 1 if getattr(sys, "last_value", None) is not None else 0
            if self.diagnostician is not None:
                self.diagnostician.finish()
            channel.send({"event": "exit", "code": code, "traceback": None})
            with contextlib.suppress(Exception):
                process.wait()
        self.stop()
