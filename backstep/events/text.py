"""The JSON text of events on the hot path, built without encoding them again.

A recorded pass makes thousands of gradient summaries and node events; encoding each with
``json`` costs more than computing it. Dicts that carry their own text (``Encoded``): the summary
batch knows every field's type and writes the text of the common case (dense, finite) in bulk,
exactly as ``json.dumps(d, separators=(",", ":"))`` would of the dict's file form
(``events.form``); the recorder uses ``text`` where it is set and encodes the dict itself
otherwise. A node or accumulate event's text is built here from the texts its parts carry
(``node_text``, ``accumulate_text``), its keys in the order ``events.spec`` states
(tests/test_events_docs.py checks it); where a part has no text, the event has none and the sink
encodes the dict. Stdlib only.
"""

from __future__ import annotations

import json
from typing import Any


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


_NAMES: dict[str, str | None] = {}  # display name -> its JSON text, None when not certain


def name_text(name: str) -> str | None:
    text = _NAMES.get(name, False)
    if text is False:
        text = _NAMES[name] = f'"{name}"' if name.isidentifier() and name.isascii() else None
    return text  # type: ignore[return-value]


def node_text(number: int, step: int, node_id: int, name: str | None, go: str | None,
              gi: str | None, saved: str | None, thread: str | None) -> str | None:
    if name is None or go is None or gi is None or saved is None:
        return None
    tail = "}\n" if thread is None else f',"thread":{compact_json(thread)}}}\n'
    return (f'{{"event":"node","pass":{number},"step":{step},"id":{node_id},"name":{name},'
            f'"grad_outputs":{go},"grad_inputs":{gi},"saved":{saved}{tail}')


def summary_text(summary: Any) -> str | None:
    if summary is None:
        return "null"
    return getattr(summary, "text", None)


def accumulate_text(number: int, leaf: str | None, node_id: int, before: Any, after: Any,
                    version: Any) -> str | None:
    before_text, after_text = summary_text(before), summary_text(after)
    if before_text is None or after_text is None or type(version) is not int:
        return None
    return (f'{{"event":"accumulate","pass":{number},"leaf":{str_text(leaf)},"id":{node_id},'
            f'"before":{before_text},"after":{after_text},'
            f'"version":{version}}}\n')
