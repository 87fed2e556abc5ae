"""What the script printed, left on the terminal once the UI has closed (as pudb and memray's
live mode do): the full-screen UI ran on the alternate screen, so without this the script's
output would vanish with it. Only its last screenful on a terminal, all of it elsewhere.

The lines are the console's: already made printable (``safe_text.script_output``, carriage
returns resolved), so they cannot move the cursor or reach the terminal's controls."""

from __future__ import annotations

import os
from typing import TextIO

from rich.cells import cell_len


def last_screenful(lines: list[str], rows: int, columns: int) -> list[str]:
    """The last lines of ``lines`` that fit in ``rows`` terminal rows of ``columns`` cells
    (a long line wraps onto several)."""
    kept: list[str] = []
    for line in reversed(lines):
        need = max(1, -(-cell_len(line.expandtabs()) // max(columns, 1)))
        if need > rows:
            break
        rows -= need
        kept.append(line)
    return kept[::-1]


def leave_output(lines: list[str], stream: TextIO) -> None:
    """Print ``lines`` on ``stream``: on a terminal, as many of the last as leave a row for the
    shell's prompt. Trailing empty lines are dropped."""
    while lines and not lines[-1]:
        lines = lines[:-1]
    try:
        size = os.get_terminal_size(stream.fileno()) if stream.isatty() else None
    except (OSError, ValueError):
        size = None
    if size is not None:
        lines = last_screenful(lines, size.lines - 1, size.columns)
    if lines:
        stream.write("\n".join(lines) + "\n")
        stream.flush()
