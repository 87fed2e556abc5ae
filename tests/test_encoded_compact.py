"""``compact_json`` calls the stdlib's C encoder directly: the text, and the error raised for
what JSON cannot carry, must be ``json.dumps(..., separators=(",", ":"), allow_nan=False)``'s."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from backstep.events.text import Encoded, compact_json


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class Number(int):
    pass


VALUES: list[Any] = [
    "plain", "quote \" and \\ and \n", "ünïcode ☃ \U0001f600", "", 0, -7, 2**70, 1.5, -0.0, 1e300,
    True, None, [], {}, [1, [2, [3]]], (1, "a"), {"a": 1, "b": [None, 2.5]}, {1: "int key"},
    {True: 1, None: 2, 1.5: 3}, Number(3), Encoded({"event": "x", "pass": 1}),
    {"caller": {"file": "/a b/c.py", "line": 3, "code": "x['%s'] = {0}"}, "roots": [4]},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_text_is_json_dumps_s(value: Any) -> None:
    assert compact_json(value) == _dumps(value)


def _error(call: Any) -> tuple[type, str]:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc), str(exc)
    raise AssertionError("no error")


def test_what_json_cannot_carry_raises_as_json_dumps_does_and_leaves_no_trace() -> None:
    loop: list[Any] = []
    loop.append(loop)
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    for bad in ([math.nan], {"x": math.inf}, {"s": {1, 2}}, [object()], {(1, 2): 3}, loop,
                cyclic):
        assert _error(lambda bad=bad: compact_json(bad)) == _error(lambda bad=bad: _dumps(bad))
    loop[0] = cyclic["self"] = 1  # no longer cyclic: they encode (no marker left from before)
    assert compact_json(loop) == "[1]" and compact_json(cyclic) == '{"self":1}'
    shared = {"k": [1]}
    assert compact_json([shared, shared]) == _dumps([shared, shared])
