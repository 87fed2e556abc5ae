"""The script outlives its UI: when ``backstep run``'s UI dies, the script's output goes on.

The debuggee's stdout and stderr are pipes that the UI reads. The UI hands the debuggee a copy of
their read ends too, so the pipes never break: a write after the UI died neither raises
BrokenPipeError nor kills the script. When the UI goes away without quitting, fds 1 and 2 are
moved (``dup2``, so C-level writes follow) to the terminal the UI ran on, or to /dev/null without
one; what the UI had not read yet, and what forked children still write into the old pipes, is
forwarded there. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import threading

from backstep.process.write_all import write_all

ENV_OUTPUT = "BACKSTEP_OUTPUT_FDS"  # "R1,R2": the debuggee's copies of the pipes' read ends
ENV_TERMINAL = "BACKSTEP_TERMINAL"  # the UI's terminal, if it had one


def terminal_path() -> str | None:
    """The terminal this process runs on (for the debuggee to fall back to), or None."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.ttyname(fd)
    return None


class Outlive:
    """Holds the read ends; ``ui_gone`` moves the output off the dead UI's pipes."""

    def __init__(self, reads: list[int], terminal: str | None) -> None:
        self.reads = reads
        self.terminal = terminal
        self.moved = False

    @classmethod
    def from_environment(cls) -> Outlive | None:
        """What the launcher passed (and removed from the environment the script sees)."""
        spec = os.environ.pop(ENV_OUTPUT, "")
        terminal = os.environ.pop(ENV_TERMINAL, None) or None
        try:
            reads = [int(fd) for fd in spec.split(",") if fd]
            for fd in reads:
                os.set_inheritable(fd, False)  # the script's subprocesses never see them
        except (ValueError, OSError):
            return None
        return cls(reads, terminal) if len(reads) == 2 else None

    def settle(self) -> None:
        """The script is over and the debuggee hangs up itself: the output stays where it is."""
        self.moved = True

    def forget(self) -> None:
        """In a forked child: the parent keeps the pipes alive, not us."""
        for fd in self.reads:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.reads = []

    def ui_gone(self) -> None:
        """Move fds 1 and 2 to the terminal (or /dev/null) and forward what is left in the
        pipes, quietly: the script must never notice."""
        if self.moved or len(self.reads) != 2:
            return
        self.moved = True
        target = self._open_target()
        if target is None:
            return
        for fd, read in zip((1, 2), self.reads, strict=True):
            drain(read, target)  # what the dead UI never read comes first
            with contextlib.suppress(OSError):
                os.dup2(target, fd)
            forward_in_background(read, target)
        with contextlib.suppress(OSError):
            os.close(target)

    def _open_target(self) -> int | None:
        flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC
        for path in (self.terminal, os.devnull):
            if path:
                with contextlib.suppress(OSError):
                    return os.open(path, flags)
        return None


def forward_in_background(read: int, fd: int) -> None:
    """Copy the pipe ``read`` to (a duplicate of) ``fd`` on a daemon thread until every
    writer has closed it, then close both: forked children keep their output."""
    try:
        target = os.dup(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.close(read)
        return
    threading.Thread(target=_forward, args=(read, target), daemon=True,
                     name=f"backstep-forward-{fd}").start()


def drain(read: int, target: int) -> None:
    """Copy what the pipe holds now, without waiting for more."""
    with contextlib.suppress(OSError):
        os.set_blocking(read, False)
        while chunk := os.read(read, 65536):
            _write_all(target, chunk)
    with contextlib.suppress(OSError):
        os.set_blocking(read, True)


def _forward(read: int, target: int) -> None:
    """Copy until every writer (forked children included) has closed the pipe."""
    while True:
        try:
            chunk = os.read(read, 65536)
        except OSError:
            return
        if not chunk:
            break
        _write_all(target, chunk)
    for done in (read, target):
        with contextlib.suppress(OSError):
            os.close(done)


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the terminal is gone: nothing left to show it to
        write_all(fd, data)
