"""A copy of the script's ``print`` output for the remote UI's console panel.

With ``--listen`` the script's fds 1 and 2 stay the job's own (its terminal or log file, seen
by the script exactly as without backstep); only ``sys.stdout`` and ``sys.stderr`` are wrapped:
each write goes to the real stream first, unchanged, and then, while a UI is attached, as an
``output`` event to it. Everything else (``isatty``, ``fileno``, ``buffer``, ``encoding``...)
is the real stream's. Writes below Python (C extensions, ``os.write(1, ...)``,
``sys.stdout.buffer``) reach the log only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

CHUNK = 64 * 1024  # characters per event: well under any line cap

Forward = Callable[[dict[str, Any]], None]


class TeeStream:
    """Stands in for ``sys.stdout`` or ``sys.stderr``."""

    def __init__(self, stream: Any, name: str, forward: Forward,
                 active: Callable[[], bool]) -> None:
        self._backstep_stream = stream
        self._backstep_name = name
        self._backstep_forward = forward
        self._backstep_active = active

    def write(self, text: str) -> int:
        written = self._backstep_stream.write(text)  # the real write first: errors are its own
        if text and self._backstep_active() and isinstance(text, str):
            try:
                for start in range(0, len(text), CHUNK):
                    self._backstep_forward({"event": "output", "stream": self._backstep_name,
                                            "text": text[start:start + CHUNK]})
            except Exception:  # noqa: BLE001, S110 - a copy for the UI must never fail a print
                pass
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backstep_stream, name)

    def __iter__(self) -> Any:
        return iter(self._backstep_stream)


def install(forward: Forward, active: Callable[[], bool]) -> Callable[[], None]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (copies go to ``forward`` while ``active()``);
    returns what puts them back (only if the script has not replaced them meanwhile)."""
    tees = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None:
            tees[name] = TeeStream(stream, name, forward, active)
            setattr(sys, name, tees[name])

    def uninstall() -> None:
        for name, tee in tees.items():
            if getattr(sys, name) is tee:
                setattr(sys, name, tee._backstep_stream)

    return uninstall
