"""The ``backstep`` command: ``run``, ``trace``, ``demo``, ``connect`` and the trace tools."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from backstep._version import __version__

SUBCOMMANDS = ("run", "trace", "demo", "show", "diff", "export", "connect", "memory",
               "history")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``only``: just that subcommand's (the one named first on the
    command line: the others' modules are not imported, 10-15 ms of every ``trace`` start,
    under 1% of the polynomial tutorial's run)."""
    parser = argparse.ArgumentParser(
        prog="backstep",
        description="A terminal stepping debugger for PyTorch backward passes.",
    )
    parser.add_argument("--version", action="version", version=f"backstep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in (only,) if only in SUBCOMMANDS else SUBCOMMANDS:
        importlib.import_module(f"backstep.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. When our stdout is closed early (``backstep demo | head``), end quietly
    with status 1, as Python's documentation advises; when it cannot be written at all (a full
    disk, ``/dev/full``, fd 1 closed), one line on stderr and status 2: never a traceback, never
    the 1 that ``diff`` means by "the runs differ". A script's own output is not ours: what
    ``trace`` runs meets a closed pipe exactly as under plain python."""
    script_stdout = False
    words = sys.argv[1:] if argv is None else argv
    if argv is None and os.environ.get("BACKSTEP_SERVED_BY"):  # a browser server's UI
        from backstep.process import leash

        leash.hold()  # ends with its server, however that ends
    try:
        try:
            parser = build_parser(words[0] if words else None)
            args = parser.parse_args(words)
            script_stdout = bool(getattr(args, "script_stdout", False))
            with _guarded_stdout(not script_stdout):
                code = int(args.handler(args) or 0)
                if argv is None and getattr(args, "quick_exit", False):  # the command line's
                    from backstep.process.quick_exit import end_process

                    sys.stdout.flush()
                    end_process(code)
                return code
        finally:
            if not script_stdout and sys.stdout is not None:
                sys.stdout.flush()  # here, where a closed pipe can still be caught
    except BrokenPipeError:
        _discard_stdout()
        return 1
    except OutputError as exc:
        _discard_stdout()
        who = f" {words[0]}" if words and words[0] in SUBCOMMANDS else ""
        print(f"backstep{who}: cannot write the output: {exc}", file=sys.stderr)
        return 2


class OutputError(Exception):
    """Standard output could not be written (not a broken pipe: that ends quietly)."""


class _Guarded:
    """Standard output (text, or its ``buffer``) whose failed writes raise ``OutputError``.
    Everything else (``fileno``, ``isatty``, ``encoding``...) is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _do(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._stream, name)(*args)
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as exc:  # ValueError: "I/O operation on closed file"
            closed = isinstance(exc, ValueError) or exc.errno == errno.EBADF
            raise OutputError("standard output is closed" if closed
                              else exc.strerror or str(exc)) from exc

    def write(self, data: Any) -> Any:
        return self._do("write", data)

    def writelines(self, lines: Any) -> Any:
        return self._do("writelines", lines)

    def flush(self) -> Any:
        return self._do("flush")

    @property
    def buffer(self) -> _Guarded:
        return _Guarded(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _ClosedStdout:
    """fd 1 was closed before we started (``>&-``): every write says so."""

    def write(self, data: Any) -> int:
        raise OutputError("standard output is closed")

    writelines = write

    def flush(self) -> None:  # nothing was written (that raised): nothing to lose
        pass

    @property
    def buffer(self) -> _ClosedStdout:
        return self

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


@contextlib.contextmanager
def _guarded_stdout(wanted: bool) -> Iterator[None]:
    """While a command of ours runs: its stdout's write errors become ``OutputError``."""
    if not wanted:
        yield
        return
    real = sys.stdout
    if real is None:
        _hold_fd_1()
        sys.stdout = _ClosedStdout()  # type: ignore[assignment]
    else:
        sys.stdout = _Guarded(real)  # type: ignore[assignment]
    try:
        yield
        sys.stdout.flush()  # still guarded: what is left in the buffer fails here, if at all
    finally:
        if isinstance(sys.stdout, _Guarded | _ClosedStdout):
            sys.stdout = real


def _hold_fd_1() -> None:
    """fd 1 is closed: hold it with /dev/null opened for reading (a write there fails), so the
    next file opened (a trace, an export) never becomes our "stdout", nor a child's."""
    try:
        os.fstat(1)
        return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 1:
            os.close(fd)


def _discard_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's last flush has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
