"""Start and end the browser server (``process.serve``) from the process that wants a UI served.

``ServedUI(command)`` starts ``python -m backstep.process.serve`` with a fresh token in its
environment (never on a command line, where ``ps`` shows it to every user), waits for its
"listening" line and knows the URL. Its stdin is a pipe from here: if this process dies, the
server sees end of file and ends too. Stdlib only (no torch, no textual, no aiohttp here).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from backstep.process import launcher
from backstep.process.remote import exposure_of, format_address, parse_address

ENV_SERVE = "BACKSTEP_SERVE"  # [HOST:]PORT to serve on instead of 127.0.0.1, any free port
START_TIMEOUT = 30.0


def ui_command(module_args: Sequence[str]) -> list[str]:
    """``python -m backstep ARGS``: what the server runs for each browser connection."""
    return [*launcher.module_command("backstep"), *module_args]


def serve_address(given: str | None) -> tuple[str, int]:
    """Where to serve: ``given`` or $BACKSTEP_SERVE ([HOST:]PORT), else 127.0.0.1 and any free
    port. ValueError with a sentence for a bad address."""
    text = given or os.environ.get(ENV_SERVE) or ""
    return parse_address(text) if text and text.lower() not in ("1", "yes", "true") \
        else ("127.0.0.1", 0)


def missing_serve() -> str:
    """The one line for a Python without textual-serve: which Python, and what to run (in a
    notebook, ``%pip`` installs into the kernel's own Python; no restart is needed, as each
    server is a new process)."""
    from backstep.process.notebook_cell import in_notebook

    how = ("%pip install 'backstep[serve]'" if in_notebook()
           else f"{shlex.quote(sys.executable)} -m pip install 'backstep[serve]'")
    return (f"textual-serve (the UI in a browser) is not installed for this Python "
            f"({sys.executable}): run {how}")


class ServedUI:
    """One ``process.serve`` child serving ``command`` on ``address`` until ``stop``."""

    def __init__(self, command: Sequence[str], address: tuple[str, int] = ("127.0.0.1", 0), *,
                 env: dict[str, str] | None = None, once: bool = False,
                 title: str = "backstep") -> None:
        self.command = list(command)
        self.host, self.port = address
        self.env = env or {}
        self.once = once
        self.title = title
        self.token = secrets.token_urlsafe(24)
        self.path = f"/{self.token}/"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and wait until it listens; RuntimeError if it cannot."""
        from backstep.process.serve import ENV_TOKEN

        argv = [*launcher.module_command("backstep.process.serve"), "--host", self.host,
                "--port", str(self.port), "--title", self.title,
                *(["--once"] if self.once else []), json.dumps(self.command)]
        env = {**os.environ, **self.env, ENV_TOKEN: self.token}
        self.process = process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
            start_new_session=True)  # a ctrl-c or a kernel interrupt is for the script
        assert process.stdout is not None
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        try:
            said = json.loads(line)
        except ValueError:
            said = None
        if isinstance(said, dict) and "missing" in said:
            self.stop()
            raise RuntimeError(missing_serve())
        try:
            self.port = int(said["port"])  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            self.stop()
            raise RuntimeError("the browser server did not start (is textual-serve "
                               "installed? pip install 'backstep[serve]')") from None

    @property
    def url(self) -> str:
        """The page's URL as this machine reaches it (its token included)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else \
            "::1" if self.host == "::" else self.host
        return f"http://{format_address(host, self.port)}{self.path}"

    def exposure(self) -> str | None:
        """A warning when the page is reachable from other machines (None: loopback only)."""
        return exposure_of(self.host or "0.0.0.0", format_address(self.host, self.port))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self) -> int | None:
        """Until the server ends (``once``: after its last browser session); its status."""
        return None if self.process is None else self.process.wait()

    def finish(self) -> None:
        """Let the pages that are open stay until they end (a person reading the end of a
        run), then end; at once if none is open. Ctrl-c ends it sooner."""
        process = self.process
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGUSR1)
        try:
            process.wait()
        except KeyboardInterrupt:
            pass
        self.stop()

    def finish_later(self) -> None:
        """``finish`` without waiting: the pages open stay for the person to review, and the
        server ends (and is reaped, on a thread of its own) once the last of them ends, or
        when this process ends (its stdin reaches end of file)."""
        process = self.process
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGUSR1)
        threading.Thread(target=self._reap, args=(process,), name="backstep-served-end",
                         daemon=True).start()

    def _reap(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        if self.process is process:
            self.stop()

    def end_later(self) -> None:
        """``stop`` on a thread of its own: the server is told to end now (its stdin closes),
        and whoever asked goes on without waiting the seconds its pages take to quit."""
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        threading.Thread(target=self.stop, name="backstep-served-end", daemon=True).start()

    def stop(self) -> None:
        """End the server and every UI it runs. Idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()  # end of file: the server ends on its own
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
