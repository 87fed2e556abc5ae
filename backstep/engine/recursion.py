"""The script's recursion limit counts from its own first frame, as under plain python.

``python script.py`` runs the script's module frame at depth 1; backstep runs it under its own
frames (the command line, the runner), so without a correction a runaway recursion stops that many
frames sooner ("[Previous line repeated 987 more times]" where python says 996) and a script that
recurses close to the limit fails only under backstep. ``shift(depth)`` raises the real limit by
the depth the script starts at and shows the script the limit python would: ``sys.getrecursionlimit``
and ``sys.setrecursionlimit`` read and set it net of that depth (with python's errors). Other
threads start at python's depth, so they get that much more room (a few frames).
"""

from __future__ import annotations

import operator
import re
import sys
from typing import Any

_real_get = sys.getrecursionlimit
_real_set = sys.setrecursionlimit
_shift: list[int] = []  # [frames added] while shifted


def depth() -> int:
    """The recursion depth of the caller's frame, as the interpreter counts it."""
    try:
        _real_set(1)  # below any depth: refused, with the depth in the message
    except RecursionError as error:
        found = re.search(r"recursion depth (\d+)", str(error))
        if found is not None:
            return int(found.group(1)) - 1  # this function's own frame
    frame: Any = sys._getframe(1)
    count = 0
    while frame is not None:
        count += 1
        frame = frame.f_back
    return count


def getrecursionlimit() -> int:
    """The limit the script set (or python's default), net of backstep's frames."""
    return _real_get() - (_shift[0] if _shift else 0)


def setrecursionlimit(limit: Any, /) -> None:
    """``sys.setrecursionlimit`` as the script sees it (same checks, same messages)."""
    limit = operator.index(limit)
    added = _shift[0] if _shift else 0
    if limit < 1 or not added:
        _real_set(limit)  # python's own error for a limit below 1
        return
    here = depth() - 1 - added  # the caller's depth as python would count it
    if here >= limit:
        raise RecursionError(
            f"cannot set the recursion limit to {limit} at the recursion depth {here}: "
            "the limit is too low"
        )
    _real_set(limit + added)


getrecursionlimit.__doc__ = _real_get.__doc__
setrecursionlimit.__doc__ = _real_set.__doc__


def shift(frames: int) -> None:
    """Give the script ``frames`` more depth than the limit says (its module frame will run
    that many frames above python's); ``unshift`` undoes it."""
    if _shift or frames <= 0:
        return
    _real_set(_real_get() + frames)
    _shift.append(frames)
    sys.getrecursionlimit = getrecursionlimit
    sys.setrecursionlimit = setrecursionlimit


def unshift() -> None:
    """Back to the real functions (the real limit keeps the script's own setting)."""
    if not _shift:
        return
    _shift.clear()
    if sys.getrecursionlimit is getrecursionlimit:
        sys.getrecursionlimit = _real_get
    if sys.setrecursionlimit is setrecursionlimit:
        sys.setrecursionlimit = _real_set
