"""``backstep.attach()`` on a terminal: the live UI in a child process on this terminal
(``python -m backstep.process.attach.ui``), the script's fds 1 and 2 moved into pipes for its
console panel while it is up, and everything restored when it quits or dies."""

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
from typing import Any

from backstep import protocol
from backstep.process import launcher, transport
from backstep.process.attach.base import Attachment

CONNECT_TIMEOUT = 30.0
# then --console R1,R2 --options JSON
UI_COMMAND = launcher.module_command("backstep.process.attach.ui")


class UIAttachment(Attachment):
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
        from backstep.engine.debuggee import ChannelSink, wait_for_start
        from backstep.engine.session import session_event

        sink = ChannelSink(self.channel)
        self.controller = wait_for_start(self.channel, lambda start: Controller(
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
            channel.send(self.exit_event(code))
            with contextlib.suppress(Exception):
                process.wait()
        self.stop()
