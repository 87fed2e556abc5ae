"""The JSON text of a recorded pass's node and accumulate events, built from the texts their
parts already carry (``encoded``): the summaries written by the summary batch, the saved-tensor
lists by ``saved_record``. The text is exactly what encoding the event in its file form (``events.form.compact_event``)
would give; where a part has no text, the event has none and the sink encodes the dict.
"""

from __future__ import annotations

import json
from typing import Any

from backstep.engine.encoded import str_text

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
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
    tail = "}\n" if thread is None else f',"thread":{_dumps(thread)}}}\n'
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
