"""Dicts that carry their own JSON text, so a trace writes them without encoding them again.

A recorded pass makes thousands of gradient summaries; encoding each with ``json`` costs more
than computing it. The summary batch knows every field's type and writes the text of the common
case (dense, finite) in bulk, exactly as ``json.dumps(d, separators=(",", ":"))`` would; the
recorder uses ``text`` where it is set and encodes the dict itself otherwise. Stdlib only.
"""

from __future__ import annotations

import json


class Encoded(dict):
    """A dict and its compact JSON text (``text``: None when not known). Never mutate one
    whose text is set: the text would no longer match (copy it with ``dict(d)`` first)."""

    __slots__ = ("text",)


_SAFE: dict[str, bool] = {}


def json_safe(name: str) -> bool:
    """Whether ``name`` is written as itself between quotes (no escapes): dtype and device
    names always are, but a text is only built when that is certain."""
    safe = _SAFE.get(name)
    if safe is None:
        safe = _SAFE[name] = json.dumps(name) == f'"{name}"'
    return safe


compact_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


_TEXTS: dict[str, str] = {}


def str_text(value: str | None) -> str:
    """The JSON text of a string (or null), remembered: names repeat in every pass."""
    if value is None:
        return "null"
    text = _TEXTS.get(value)
    if text is None:
        if len(_TEXTS) >= 65536:
            _TEXTS.clear()
        text = _TEXTS[value] = compact_json(value)
    return text
