"""What one ``output`` event of a trace gives the console: at most its two ends.

``backstep trace`` records at most ``traces.output.LIMIT`` characters of output, but a trace made
by hand or by another tool may hold one event of 100 MB: parsed whole and written to the console
it froze ``show`` for a minute at 790 MB. An event longer than ``2 * SHOWN`` characters shows its
first and last ``SHOWN`` with the size of what is left out between them; a line longer than
``LONG`` bytes is not even parsed whole: only its two ends are read and decoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

SHOWN = 1 << 14  # characters kept from each end of one output event
LONG = 1 << 20  # bytes of a line above which only its ends are read
_EDGE = 6 * SHOWN  # bytes read from each end of a long line (a character is 1-6 bytes of JSON)
_OPENING = re.compile(rb'\{"event": ?"output", ?"stream": ?"(stdout|stderr)", ?"text": ?"')
_CLOSING = re.compile(rb'"(, ?"truncated": ?(?:true|false))?\}\s*\Z')


def capped(text: str) -> str:
    """``text``, or its two ends and what is left out between them."""
    if len(text) <= 2 * SHOWN:
        return text
    return _joined(text[:SHOWN], f"{len(text) - 2 * SHOWN:,} characters", text[-SHOWN:])


def _joined(head: str, hidden: str, tail: str) -> str:
    return f"{head}\n… {hidden} not shown …\n{tail}"


def long_line(read: Callable[[int, int], bytes | None], start: int,
              end: int) -> tuple[str, str] | None:
    """(stream, text) of an ``output`` line too long to parse whole, from its two ends as read
    by ``read(start, end)``; None when they do not read as the recorder writes the event."""
    head, tail = read(start, start + _EDGE), read(end - _EDGE, end)
    if head is None or tail is None:
        return None
    opening, closing = _OPENING.match(head), _CLOSING.search(tail)
    if opening is None or closing is None:
        return None
    first = _decoded(head[opening.end():], from_end=False)
    last = _decoded(tail[:closing.start()], from_end=True)
    if first is None or last is None:
        return None
    hidden = (end - start) - len(head) - len(tail)
    text = _joined(first[:SHOWN], f"about {hidden:,} bytes", last[-SHOWN:])
    if closing.group(1) and "true" in closing.group(1).decode():
        text += "\n[output truncated]\n"
    return opening.group(1).decode(), text


def _decoded(fragment: bytes, *, from_end: bool) -> str | None:
    """A piece of a JSON string's body cut anywhere (inside an escape or a UTF-8 sequence):
    decoded after dropping the few bytes at the cut that do not decode."""
    for drop in range(13):
        piece = fragment[drop:] if from_end else fragment[:len(fragment) - drop]
        try:
            text = json.loads(b'"' + piece + b'"')
        except ValueError:
            continue
        if isinstance(text, str):
            return text
    return None


def output_entry(read: Callable[[int, int], bytes | None],
                 parse: Callable[[int, int], dict[str, Any] | None],
                 start: int, end: int) -> tuple[str, str]:
    """One ``output`` event of a trace as (stream, text): a long one shows its two ends, any
    other is parsed (``parse``) and its text capped."""
    if end - start > LONG:
        return long_line(read, start, end) or (
            "stdout", f"[an output event of {end - start:,} bytes, not shown]\n")
    event = parse(start, end) or {}
    text = event.get("text")
    return (str(event.get("stream") or "stdout"),
            capped(text if isinstance(text, str) else "")
            + ("\n[output truncated]\n" if event.get("truncated") else ""))
