"""Strings from a trace or a peer, made safe to show: a trace is a file someone sent you and a
``connect`` peer is whoever answers on that port, so every string they carry is hostile.

A terminal obeys the control characters in what it is given: ``ESC ] 52`` writes the clipboard,
``ESC ] 0`` the window title, ``ESC [ 2J`` clears the screen, and a C1 byte (``\\x9b``) starts
the same sequences in one character. Here every control character (C0, DEL, C1), every lone
surrogate (it cannot be encoded to print) and every bidirectional override (it reorders what
the eye reads) is shown as its escape, ``\\x1b``, so it is seen and never obeyed. Textual markup
(``[/]``, ``[@click=...]``) is the UI's to keep out (``Text`` objects, ``markup=False``); DOT
quoting is here, for ``backstep export``. Stdlib only: the trace reader, the channel, the CLI
and the UI import it.
"""

from __future__ import annotations

import re
from typing import Any

_OTHERS = "\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069"  # DEL, C1, surrogates, bidi
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_PATTERNS: dict[str, re.Pattern[str]] = {}
# the fields of an event whose text may run over several lines: newlines and tabs stay
MULTILINE = frozenset({"traceback", "message", "error", "detail", "hint"})
# CSI sequences (colours, cursor moves, erasing) in a script's output: dropped, text kept
_CSI = re.compile("(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]")


def _pattern(keep: str) -> re.Pattern[str]:
    pattern = _PATTERNS.get(keep)
    if pattern is None:
        c0 = "".join(re.escape(chr(code)) for code in range(0x20) if chr(code) not in keep)
        pattern = _PATTERNS[keep] = re.compile(f"[{c0}{_OTHERS}]")
    return pattern


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control character shown as its escape (ESC as ``\\x1b``, a newline
    as ``\\n``), except those in ``keep`` (of newline, tab and carriage return)."""
    pattern = _pattern(keep)
    return pattern.sub(_visible, text) if pattern.search(text) else text


def lines(text: str) -> str:
    """Text of several lines (a traceback, a message): newlines and tabs stay."""
    return printable(text, "\n\t")


def script_output(text: str) -> str:
    """What a script printed, for the console panel: colours and cursor moves (CSI sequences)
    are dropped and the text stays; anything else that would reach the terminal (an OSC title
    or clipboard write, a lone ESC) is shown as its escape. Newlines, tabs and carriage
    returns stay (the console breaks lines on them)."""
    if "\x1b" in text or "\x9b" in text:
        text = _CSI.sub("", text)
    return printable(text, "\n\t\r")


def clean(value: Any, key: str = "") -> Any:
    """A parsed event (or any JSON value) with every string made safe: one line, except the
    fields in ``MULTILINE`` (``lines``) and a script's output (``text``: ``script_output``).
    Returns ``value`` itself when nothing needed changing, so a clean event costs a walk and
    no copy. Dict keys are left as they are (nothing shows them). May raise RecursionError on
    absurd nesting, as ``json.loads`` does."""
    kind = type(value)
    if kind is str:
        if key == "text":
            return script_output(value)
        return printable(value, "\n\t" if key in MULTILINE else "")
    if kind is dict:
        places: Any = value.items()
    elif kind is list:
        places = enumerate(value)
    else:
        return value
    copy: Any = None
    for at, item in places:
        if type(item) in _SCALARS:
            continue
        new = clean(item, at if kind is dict else key)
        if new is not item:
            if copy is None:
                copy = kind(value)
            copy[at] = new
    return value if copy is None else copy


_SCALARS = (int, float, bool, type(None))


# what in a line of JSON can decode to a string ``clean`` would change: an escaped control
# (C0, DEL, C1), bidirectional control or surrogate, or the same raw (JSON forbids raw C0 in a
# string, but a file is not bound by it; ``json.loads`` decodes raw surrogates too)
_ESCAPED = re.compile(rb"\\u(?:00[01]|00[89]|007[fF]|202[a-eA-E]|206[6-9]|[dD][89a-fA-F])")
_RAW = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|"
                  rb"\xe2\x81[\xa6-\xa9]|\xed[\xa0-\xbf]")
_ASCII = bytes(range(0x20, 0x7F)) + b"\n"  # a line of these needs no _RAW search


def suspect(raw: bytes) -> bool:
    """Whether a line of JSON may hold a string that ``clean`` would change: a fast test (a
    thirtieth of ``json.loads`` or less) that spares the walk for the usual line, accents
    (``\\u00e9``) and all; a false alarm only costs the walk."""
    if _ESCAPED.search(raw):
        return True
    return bool(raw.translate(None, _ASCII)) and _RAW.search(raw) is not None


# -- Graphviz DOT ---------------------------------------------------------------------------

def dot_string(text: str) -> str:
    """``text`` as a quoted DOT string: backslashes and quotes escaped (so no ``\\N``-style
    escape and no end of the string), newlines as DOT's ``\\n``, controls ``printable``."""
    text = printable(text, "\n")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class DotIdError(ValueError):
    """A node id that is not an integer: written as DOT it could be anything (an attribute
    list, a URL), so the export stops."""


def dot_id(value: Any) -> int:
    """A node id as written in DOT (``n{id}``): an int (not a bool), else ``DotIdError``."""
    if type(value) is int:
        return value
    raise DotIdError(f"node id {printable(repr(value))[:60]} is not an integer")
