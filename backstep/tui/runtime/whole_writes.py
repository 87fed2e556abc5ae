"""Every frame the UI draws reaches the terminal whole.

Textual's driver writes each frame to ``sys.__stderr__`` and never checks how much of it was
written. Two common set-ups make a write come back short:
- ``python -u`` or ``PYTHONUNBUFFERED=1`` (set by many Docker images, IDE run configurations
  and CI runners): stderr then has no buffer, and its text layer drops whatever the descriptor
  did not take. A write to a terminal that is busy (its buffer full: a large frame, a slow ssh
  link) and is interrupted part way (a profiler or debugger attaching: py-spy, gdb, strace; a
  stop and continue) takes only part of the frame;
- a terminal left non-blocking by another program sharing it: the write takes what fits and
  the rest is dropped (unbuffered) or raises in Textual's writer thread, which dies and leaves
  the screen frozen (buffered).

Textual only redraws what changed, so a lost piece of a frame stays wrong until that region
changes again: measured with py-spy sampling the UI at 250 Hz under ``PYTHONUNBUFFERED=1``,
4 runs of 12 lost the status line of a stop (it kept saying "running…" while every panel
showed the stop, so the person waited on a debugger that was waiting for them), and escape
sequences were cut in half (``38;5;253;48;5;235`` printed as text).

``driver_class`` gives the driver a stream that writes each frame to the end: it writes again
after a short write and waits for the terminal to take more when it is non-blocking.
"""

from __future__ import annotations

import functools
import io
import os
from typing import Any, TypeVar

from textual.driver import Driver

from backstep.process.write_all import write_all

D = TypeVar("D", bound=type[Driver])


class WholeWrites(io.TextIOBase):
    """A text stream on a file descriptor whose ``write`` returns only once all of it is
    written (with the encoding and errors of the stream it stands for)."""

    def __init__(self, fd: int, encoding: str = "utf-8", errors: str = "strict") -> None:
        super().__init__()
        self._fd = fd
        self._encoding = encoding
        self._errors = errors

    @property
    def encoding(self) -> str:
        return self._encoding

    @property
    def errors(self) -> str:
        return self._errors

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        write_all(self._fd, text.encode(self._encoding, self._errors))
        return len(text)

    def flush(self) -> None:
        """Nothing is held back: each ``write`` is on the descriptor when it returns."""


def whole(stream: Any) -> Any:
    """``stream`` as a ``WholeWrites`` on its descriptor; ``stream`` itself when it has no
    descriptor (a test's stand-in, a stream already closed), and on Windows, whose console
    takes text through its own stream, not bytes through a descriptor."""
    if isinstance(stream, WholeWrites) or os.name != "posix":
        return stream
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    return WholeWrites(fd, getattr(stream, "encoding", None) or "utf-8",
                       getattr(stream, "errors", None) or "strict")


@functools.cache
def driver_class(base: D) -> D:
    """``base``, writing its frames through ``whole``: a driver without a terminal stream
    (the web driver) is left as it is."""

    class Whole(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            file = getattr(self, "_file", None)  # Textual's drivers: the stream frames go to
            if file is not None:
                self._file = whole(file)

    Whole.__name__ = Whole.__qualname__ = f"Whole{base.__name__}"
    return Whole  # type: ignore[return-value]
