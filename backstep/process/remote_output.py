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
from collections.abc import Callable
from typing import Any

from backstep.traces.output import CopyingStream

CHUNK = 64 * 1024  # characters per event: well under any line cap

Forward = Callable[[dict[str, Any]], None]


class TeeStream(CopyingStream):
    """Stands in for ``sys.stdout`` or ``sys.stderr``: copies go out at once, while a UI is
    attached (no event is built otherwise)."""

    def __init__(self, stream: Any, name: str, forward: Forward,
                 active: Callable[[], bool]) -> None:
        super().__init__(stream, name)
        self._forward = forward
        self._active = active

    def _copy(self, text: str) -> None:
        if self._active():
            for start in range(0, len(text), CHUNK):
                self._forward({"event": "output", "stream": self._name,
                               "text": text[start:start + CHUNK]})


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
                setattr(sys, name, tee._stream)

    return uninstall
