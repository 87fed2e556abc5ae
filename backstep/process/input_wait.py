"""Tell the UI when the script waits for a line on stdin, so its console can offer one.

Under ``backstep run`` the script's stdin is a pipe from the UI: nothing tells the UI that the
script wants input. ``sys.stdin`` is replaced by a ``TextIOWrapper`` of the same type family on
the same buffer (same encoding, errors, newlines), whose reads first say ``{"event": "input"}``
when nothing is waiting in the pipe. ``input()``, ``sys.stdin.readline()``, ``read()`` and
iteration all go through it. Reads below Python (``os.read(0)``, a C library) are not seen; the
console's input line can be opened by hand for those.
"""

from __future__ import annotations

import io
import os
import select
import sys
from collections.abc import Callable
from typing import Any


class NoticingStdin(io.TextIOWrapper):
    """``sys.stdin`` that calls ``notice()`` before a read that would wait."""

    notice: Callable[[], None] | None = None

    def _waiting(self) -> None:
        notice = self.notice
        if notice is None:
            return
        try:
            ready, _, _ = select.select([self.fileno()], [], [], 0)
        except (OSError, ValueError):
            return
        if not ready:
            try:
                notice()
            except Exception:  # noqa: BLE001, S110 - reading stdin must work regardless
                pass

    def read(self, size: int | None = -1) -> str:
        self._waiting()
        return super().read(size)

    def readline(self, size: int = -1) -> str:
        self._waiting()
        return super().readline(size)

    def readlines(self, hint: int = -1) -> list[str]:
        self._waiting()
        return super().readlines(hint)


def install(emit: Callable[[dict[str, Any]], Any]) -> NoticingStdin | None:
    """Replace ``sys.stdin`` (when it is a plain text stream) by one that emits ``input``."""
    original = sys.stdin
    if type(original) is not io.TextIOWrapper:
        return None
    try:
        stdin = NoticingStdin(original.buffer, encoding=original.encoding,
                              errors=original.errors, newline=None if os.name == "nt" else "\n",
                              line_buffering=original.line_buffering)
        stdin.mode = original.mode  # type: ignore[misc]
    except (AttributeError, ValueError, OSError):
        return None
    stdin.notice = lambda: emit({"event": "input"})
    sys.stdin = stdin
    return stdin


class RoutedStdin:
    """``sys.stdin`` while ``attach()``'s UI owns the terminal: reads take lines typed in the
    console's input line (``line()``: a line, "" for ctrl+d, None once the UI is gone), so the
    script and the UI never read the terminal at once; with the UI gone, reads go to the real
    stdin again, a read that was waiting included. Everything else is the real stdin's."""

    def __init__(self, original: Any, line: Callable[[], str | None]) -> None:
        self._original = original
        self._line = line
        self._pending = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def _fill(self) -> bool:
        """Make sure a line is pending; False when the UI is gone (use the real stdin)."""
        if self._pending:
            return True
        got = self._line()
        if got is None:
            return False
        self._pending = got
        return True

    def readline(self, size: int | None = -1) -> str:
        if not self._fill():
            return self._original.readline(-1 if size is None else size)
        cut = len(self._pending) if size is None or size < 0 else size
        text, self._pending = self._pending[:cut], self._pending[cut:]
        return text

    def read(self, size: int | None = -1) -> str:
        if size is not None and size >= 0:
            return self.readline(size)
        parts = []
        while True:
            if not self._fill():
                parts.append(self._original.read())
                break
            line, self._pending = self._pending, ""
            if not line:
                break
            parts.append(line)
        return "".join(parts)

    def readlines(self, hint: int = -1) -> list[str]:
        lines: list[str] = []
        while line := self.readline():
            lines.append(line)
            if 0 < hint <= sum(map(len, lines)):
                break
        return lines

    def __iter__(self) -> RoutedStdin:
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line
