"""Bytes written to a file descriptor to the end.

``os.write`` may take only part of what it is given: a write to a busy terminal that a signal or
a ptrace stop interrupts returns early, and a descriptor that is non-blocking (a terminal that
another program left so) takes what fits or refuses with ``BlockingIOError``. Whatever writes
to the person's terminal from below Python's buffered streams (the UI's frames, the script's
output once the UI is gone) writes through here, so nothing is dropped.
"""

from __future__ import annotations

import os
import select


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``: again after a short write, and, when ``fd`` is
    non-blocking and full, once it has room. Other ``OSError`` s propagate."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[written:]
