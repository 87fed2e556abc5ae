"""A ``node`` event's few fields read straight from its line, when the line is in the exact
form our recorder writes.

While ``f`` or ``c`` runs through a 6,380-node pass, the live reader folds in a node event
every ~0.1 ms of the debuggee's time and needs five of its fields at once (pass, step, id,
name, error) and the bytes its saved tensors hold; the gradient summaries are read again from
the line if a panel ever wants them (``LazyRecord``). Decoding each line in full, putting its
defaults back and checking its schema cost ~22 us a line, ~0.14 s of the UI's CPU a pass,
taken from the debuggee on a shared machine; matching it here costs ~5 us.

The peer is hostile, so the match is of the whole line against a grammar that is a strict
subset of what the full path accepts: the keys in the order ``events.spec`` states (the
recorder's; a key with a default there may be absent) with no key repeated, ints that the
schema's bounds hold, JSON numbers as the decoder reads them, strings of a few safe ASCII
characters (no escape, no control: ``safe_text.clean`` leaves them as they are), no spaces.
A line this reads decodes, passes ``events.spec.check`` and gives the same fields (tests/
test_node_line.py compares the two on hostile variants); anything else (an error message, a
non-ASCII name, a summary with a note, a key out of order) returns None and takes the full path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from backstep import protocol
from backstep.events.spec import EVENTS, SAVED_ENTRY, SUMMARY

_INT = rb"(?:0|[1-9][0-9]{0,14})"  # at most 15 digits: within the schema's 2**53
# a JSON number as ``json`` reads it; an int part of at most 19 digits stays within 2**64
_NUM = rb"-?(?:0|[1-9][0-9]{0,18})(?:\.[0-9]+)?+(?:[eE][-+]?[0-9]+)?+"
_NUMBER = rb'(?:' + _NUM + rb'|null|"nan"|"inf"|"-inf")'
_SCALAR = rb"(?:" + _NUMBER + rb"|true|false)"
_WORD = rb'"[A-Za-z0-9_]{1,64}"'  # a dtype, a status, a saved tensor's name
_INTS = rb"\[(?:" + _INT + rb"(?:," + _INT + rb")*+)?+\]"
# every repeat is possessive (``*+``, ``?+``): the grammar never needs to take one back, as
# each item starts with its own key or character, and not remembering where to costs less
def _keys(fields: Iterable[str], grammar: dict[str, bytes], optional: frozenset[str]) -> bytes:
    """The keys of ``grammar``, in the spec's order of ``fields``, each with its value's grammar;
    an ``optional`` key may be absent (a default the file leaves out, a part seldom there)."""
    out = b""
    for key in fields:
        if key not in grammar:
            continue  # a key this reader does not take: a line with it goes the full path
        item = b'"' + key.encode() + b'":' + grammar[key]
        out = item if not out else out + (rb"(?:," + item + rb")?+" if key in optional
                                           else b"," + item)
    return out


_SUMMARY = rb"\{" + _keys(SUMMARY.fields, {
    "shape": rb"(?:" + _INTS + rb"|null)", "dtype": rb"(?:" + _WORD + rb"|null)",
    "device": rb'"[a-z0-9_:]{1,32}"', "min": _NUMBER, "max": _NUMBER, "mean": _NUMBER,
    "norm": _NUMBER, "nonfinite": _INT,
    "values": rb"\[(?:" + _SCALAR + rb"(?:," + _SCALAR + rb")*+)?+\]",
}, frozenset({"device", "nonfinite", "values"})) + rb"\}"
_SUMMARIES = (rb"(?:\[(?:(?:" + _SUMMARY + rb"|null)(?:,(?:" + _SUMMARY + rb"|null))*+)?+\]"
              rb"|null)")
_SAVED_ONE = rb"\{" + _keys(SAVED_ENTRY.fields, {
    "name": _WORD, "status": _WORD, "shape": rb"(?:" + _INTS + rb"|null)",
    "dtype": rb"(?:" + _WORD + rb"|null)", "bytes": _INT,
    "version": rb'(?:\{"saved":' + _INT + rb',"now":' + _INT + rb"\}|null)",
    "value": rb"(?:" + _SCALAR + rb"|\[(?:" + _SCALAR + rb"(?:," + _SCALAR + rb")*+)?+\])",
}, frozenset({"status", "shape", "dtype", "bytes", "version", "value"})) + rb"\}"
_SAVED = rb"(?:\[(?:" + _SAVED_ONE + rb"(?:," + _SAVED_ONE + rb")*+)?+\]|null)"
# the node event's keys as the spec orders them; a group for each field ``read`` returns
_GROUPS = ("pass", "step", "id", "name", "saved")
_NODE = {"pass": rb"(" + _INT + rb")", "step": rb"(" + _INT + rb")", "id": rb"(" + _INT + rb")",
         "name": rb'"([A-Za-z_][A-Za-z0-9_]{0,199})"', "grad_outputs": _SUMMARIES,
         "grad_inputs": _SUMMARIES, "saved": rb"(" + _SAVED + rb")"}
_ORDER = [key for key in EVENTS["node"].fields if key in _NODE]
_PASS, _STEP, _ID, _NAME, _SAVED_GROUP = (1 + [k for k in _ORDER if k in _GROUPS].index(key)
                                          for key in _GROUPS)
_LINE = re.compile(rb'\{"event":"node",' + _keys(_ORDER, _NODE, frozenset()) + rb"\}\n?")
# in the saved list matched above every string is a word: ``"bytes":`` there is only a key
_BYTES = re.compile(rb'"bytes":([0-9]+)')


class NodeFields(dict):  # type: ignore[type-arg]
    """A node event as far as the model reads it at once: event, pass, step, id, name and
    error (None), as the full decode and ``events.form.expand`` give them, and ``saved_bytes``,
    what its saved list's sizes sum to. Only ``read`` makes one (no JSON makes this type)."""

    __slots__ = ("saved_bytes",)
    saved_bytes: int


def read(line: bytes) -> NodeFields | None:
    """The fields of a node event written in our recorder's exact form, or None (read the
    line in full then)."""
    if len(line) > protocol.MAX_LINE:
        return None
    m = _LINE.fullmatch(line)
    if m is None:
        return None
    fields = NodeFields(event="node", step=int(m[_STEP]), id=int(m[_ID]),
                        name=m[_NAME].decode("ascii"), error=None)
    fields["pass"] = int(m[_PASS])
    fields.saved_bytes = sum(map(int, _BYTES.findall(m[_SAVED_GROUP])))
    return fields


def saved_bytes(event: Any) -> int | None:
    """What ``read`` found the saved sizes to sum to, if ``event`` is what it made."""
    return event.saved_bytes if type(event) is NodeFields else None
