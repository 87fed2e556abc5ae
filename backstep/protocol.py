"""The line framing both sides of the event stream share: stdlib only, JSON only.

Events flow from the debuggee (the process running the user's script) to whoever consumes them: a
trace file, the live UI, a test. Commands flow from the UI to the debuggee while it is paused.

Every message is one JSON object on one line. Events carry ``"event"``, commands ``"cmd"``.
Floats that are not finite (NaN, +-Inf) are written as the strings ``"nan"``, ``"inf"``,
``"-inf"`` so every line is strict JSON that jq and browsers accept.

What each event holds is stated once, in ``backstep.events.spec``; the commands and their check
are ``backstep.events.commands``, breakpoints ``backstep.events.breakpoints``. This module is the
framing both share: one line in, one line out, and the errors a line can earn.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any

VERSION = 2  # 2: trace files leave out keys at their default value (backstep/events/form.py)

# The longest line either side accepts; anything longer is answered with an error and dropped.
# Events (a pass_begin lists every node of a graph) can be large; commands never are.
MAX_LINE = 16 * 1024 * 1024
MAX_COMMAND_LINE = 1024 * 1024

# An error reply quotes at most this much of what it refuses (a 16 MB line must not echo back).
MAX_ERROR_TEXT = 300

# Integers in commands (request ids, pass and node ids, indices) stay within what every consumer
# of the protocol can hold exactly; a number beyond that is refused, not overflowed later.
MAX_INT = 2**53


class ProtocolError(ValueError):
    """A message that is not valid JSON or does not fit the schema."""


def clean_number(x: float) -> float | str:
    """A float as JSON can carry it: non-finite values become strings."""
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def encode(message: dict[str, Any]) -> bytes:
    """One message as one strict-JSON line (bytes, newline-terminated)."""
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse one line into a message dict; raise ProtocolError for anything else."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE:
            raise ProtocolError("message too long")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"not UTF-8: {exc}") from None
    try:
        message = _DECODER.decode(line)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    return message


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"non-standard JSON constant {name}")


# one decoder for every line: ``json.loads`` with an option builds a new one per call, a quarter
# of the decoding time of a big pass's thousands of node events
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


_quoter = reprlib.Repr()  # keyword arguments arrive in Python 3.12
_quoter.maxlevel, _quoter.maxdict, _quoter.maxlist, _quoter.maxstring = 3, 4, 4, 60
_quoter.maxlong, _quoter.maxother = 40, 60


def quote(value: Any) -> str:
    """A short repr of any value for an error message: nested and huge values are abridged."""
    try:
        text = _quoter.repr(value)
    except Exception:  # noqa: BLE001 - quoting must never be what fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 100 else text[:97] + "..."


def error_event(message: str, req: int | None = None) -> dict[str, Any]:
    """An ``error`` event whose text is never longer than MAX_ERROR_TEXT characters."""
    if len(message) > MAX_ERROR_TEXT:
        message = message[: MAX_ERROR_TEXT - 3] + "..."
    return {"event": "error", "message": message, "req": req}


def describe(exc: BaseException) -> str:
    """An exception as an error reply's text: a ProtocolError says it all, others name their
    type (the reply is cut to MAX_ERROR_TEXT by ``error_event``)."""
    if isinstance(exc, ProtocolError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
