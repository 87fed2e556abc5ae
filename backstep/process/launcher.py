"""Start the debuggee child and guarantee its end (stdlib only: no torch, no textual).

The child runs the user's script under the engine; the UI process listens on a private socket
(``transport.Listener``), reads the child's stdout/stderr from pipes with ``os.read`` on the raw
fds (so C-level writes and partial lines arrive as they happen), and on quit or crash ends it:
abort, close the socket, SIGTERM to its process group after a grace period, SIGKILL after
another. The child runs in its own session so a signal for the UI's terminal never reaches it
half-way and ``killpg`` reaches anything it spawned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from backstep.process import transport

DEBUGGEE_MODULE = "backstep.engine.debuggee"

OutputCallback = Callable[[str, str], Any]  # (text, "stdout" | "stderr")


# ``python -m`` puts the working directory first on sys.path while the module starts, so a
# ``json.py`` or ``secrets.py`` there ran in backstep's own child, where ``python
# /abs/script.py`` never looks. This runs the module exactly as -m does (runpy, same argv),
# with that first entry the standard library's directory (searched anyway) until the runner
# sets it to the script's directory, as python would have it.
_AS_MODULE = ("import sys; sys.path[0] = __import__('os').path.dirname(__import__('os').__file__)"
              "; __import__('runpy')._run_module_as_main(sys.argv.pop(1))")


def module_command(module: str) -> list[str]:
    """``python -m module``, without the working directory on sys.path (``_AS_MODULE``)."""
    return [sys.executable, "-c", _AS_MODULE, module]


def debuggee_command(script: str, script_args: list[str], *, source: bool = True,
                     module: str | None = None, as_module: bool = False) -> list[str]:
    """The child's argv, as the contract with the debuggee fixes it (``as_module``: ``script``
    is a module name, run as ``python -m`` runs it)."""
    return [*module_command(module or DEBUGGEE_MODULE),
            *([] if source else ["--no-source"]), *(["--module"] if as_module else []),
            "--", script, *script_args]


class Debuggee:
    """One debuggee process: its listener, its pipes, its lifecycle."""

    def __init__(self, argv: list[str], on_output: OutputCallback | None = None,
                 cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.on_output = on_output
        self.cwd = cwd
        self.extra_env = env or {}
        self.listener: transport.Listener | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: transport.Channel | None = None
        self._pumps: list[threading.Thread] = []
        self.stdin: int | None = None  # the write end of the script's stdin
        self._closed = False
        self._lock = threading.Lock()
        self._stdin_lock = threading.Lock()

    def start(self) -> None:
        """Listen, then start the child with the socket path in its environment and the token
        in an inherited pipe (``transport.Listener.handoff``).

        Its stdout and stderr are pipes read here; the child gets copies of their read ends
        (and this terminal's name) so that it outlives a UI that dies (``engine.outlive``).
        Its stdin is a pipe from here: the console's input line writes into it."""
        from backstep.process import outlive

        self.listener = transport.Listener()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        in_read, in_write = os.pipe()
        env = dict(os.environ)
        env.update(self.extra_env)
        env.update(self.listener.handoff())
        env.setdefault("PYTHONUNBUFFERED", "1")  # the console panel shows output as it happens
        env[outlive.ENV_OUTPUT] = f"{out_read},{err_read}"
        terminal = outlive.terminal_path()
        if terminal is not None:
            env[outlive.ENV_TERMINAL] = terminal
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=in_read,
                stdout=out_write,
                stderr=err_write,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=(*self.listener.pass_fds, out_read, err_read),
            )
        except OSError:
            for fd in (out_read, err_read, in_write):
                os.close(fd)
            self.listener.close()
            self.listener = None
            raise
        finally:
            for fd in (out_write, err_write, in_read):
                os.close(fd)
        self.listener.handed_off()
        os.set_blocking(in_write, False)  # a script that never reads must not block the UI
        self.stdin = in_write
        for name, fd in (("stdout", out_read), ("stderr", err_read)):
            thread = threading.Thread(target=self._pump, args=(fd, name),
                                      name=f"backstep-{name}", daemon=True)
            thread.start()
            self._pumps.append(thread)

    def write_stdin(self, text: str) -> bool:
        """Send what the person typed to the script's stdin; False once that is closed."""
        data = text.encode()
        with self._stdin_lock:
            fd = self.stdin
            if fd is None:
                return False
            try:
                while data:
                    data = data[os.write(fd, data):]
            except OSError:
                return False
        return True

    def close_stdin(self) -> None:
        """End of input for the script (ctrl+d in the console)."""
        with self._stdin_lock:
            fd, self.stdin = self.stdin, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _pump(self, fd: int, name: str) -> None:
        """Forward everything the child writes, as soon as it writes it, until EOF."""
        decoder_buffer = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            data = decoder_buffer + chunk
            # keep an incomplete UTF-8 sequence for the next read
            cut = len(data)
            for back in range(1, min(4, len(data)) + 1):
                byte = data[-back]
                if byte & 0xC0 == 0x80:
                    continue
                if byte & 0x80 and back < _utf8_length(byte):
                    cut = len(data) - back
                break
            decoder_buffer = data[cut:]
            text = data[:cut].decode("utf-8", errors="replace")
            if text and self.on_output is not None:
                try:
                    self.on_output(text, name)
                except Exception:  # noqa: BLE001 - the pump must keep draining the pipe
                    pass
        if decoder_buffer and self.on_output is not None:
            try:
                self.on_output(decoder_buffer.decode("utf-8", errors="replace"), name)
            except Exception:  # noqa: BLE001
                pass
        with contextlib.suppress(OSError):
            os.close(fd)

    def accept(self, timeout: float = 60.0) -> transport.Channel | None:
        """Wait for the child to connect; None if it died first, the debuggee was closed
        meanwhile, or ``timeout`` seconds passed (in all: no handshake extends it)."""
        if self.listener is None or self.process is None:
            return None
        process = self.process
        channel = self.listener.accept(
            timeout, give_up=lambda: self._closed or process.poll() is not None)
        with self._lock:
            if channel is not None and self._closed:  # close() ran meanwhile: hang up
                channel.close()
                channel = None
            self.channel = channel
        return channel

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_output(self, timeout: float = 1.0) -> None:
        """Let the pumps deliver what the child wrote before it ended."""
        for thread in self._pumps:
            thread.join(timeout)

    def close(self, grace: float = 1.0, kill_after: float = 2.0) -> int | None:
        """End the child for good: abort, hang up, SIGTERM its group, then SIGKILL. Idempotent."""
        with self._lock:
            if self._closed:
                return self.poll()
            self._closed = True
        if self.channel is not None:
            if self.poll() is None:
                self.channel.send({"cmd": "abort"})
            # Shut the socket down before closing: Channel.close() closes its reader file first,
            # which blocks while another thread sits in receive(); the shutdown wakes that
            # thread (and the debuggee's command reader) with end-of-stream.
            try:
                self.channel.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.channel.close()
        self.close_stdin()
        code = self.wait(grace) if self.process is not None else None
        if self.process is not None and code is None:
            self._signal(signal.SIGTERM)
            code = self.wait(kill_after)
            if code is None:
                self._signal(signal.SIGKILL)
                code = self.wait(5.0)
        if self.process is not None:
            self._end_group(kill_after)
        self.wait_output(0.5)
        if self.listener is not None:
            self.listener.close()
        return code

    def _end_group(self, kill_after: float) -> None:
        """What the script forked or spawned in its session (a DataLoader worker, a bare fork)
        ends with it, even once the debuggee itself is gone: SIGTERM, then SIGKILL."""
        assert self.process is not None
        group = self.process.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + kill_after
            while time.monotonic() < deadline:
                if not _group_alive(group):
                    return
                time.sleep(0.02)

    def _signal(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                self.process.send_signal(sig)
            except (ProcessLookupError, OSError):
                pass

    def __enter__(self) -> Debuggee:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies waiting for their reaper don't)."""
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != b"Z":
            return True
    return False


def _utf8_length(first: int) -> int:
    if first >= 0xF0:
        return 4
    if first >= 0xE0:
        return 3
    if first >= 0xC0:
        return 2
    return 1


def exit_status(code: int | None) -> int:
    """A process status as a shell reports it: 128 + signal for a killed process."""
    if code is None:
        return 1
    return 128 - code if code < 0 else code
