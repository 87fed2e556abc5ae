"""The event format is stated once (``backstep/events/spec.py``): docs/trace.md lists exactly its
events and fields, and every event the code builds is one the spec knows."""

from __future__ import annotations

import ast
from pathlib import Path

from backstep.events.spec import EVENTS, reference

ROOT = Path(__file__).resolve().parent.parent


def test_trace_md_lists_exactly_the_spec_s_events_and_fields() -> None:
    text = (ROOT / "docs" / "trace.md").read_text()
    assert reference() in text, ("docs/trace.md's event list differs from backstep/events/spec.py;"
                                 " paste backstep.events.spec.reference() into it")


def _built_events() -> dict[str, str]:
    """Every ``{"event": NAME, ...}`` literal in backstep's code: name -> where."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "backstep").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (isinstance(key, ast.Constant) and key.value == "event"
                            and isinstance(value, ast.Constant) and isinstance(value.value, str)):
                        found.setdefault(value.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_event_the_code_builds_is_in_the_spec() -> None:
    built = _built_events()
    assert {"session", "node", "stopped", "hello"} <= set(built)  # the reading finds them
    unknown = {name: where for name, where in built.items() if name not in EVENTS}
    assert not unknown, unknown


def test_the_spec_s_fields_are_in_the_recorder_s_key_order() -> None:
    """A node event as the recorder writes it has its keys in the spec's order (the fast reader,
    ``tui/state/node_line``, builds its grammar from that order)."""
    from backstep.events.text import node_text

    line = node_text(1, 2, 3, '"MulBackward0"', "[]", "[]", "[]", "t")
    assert line is not None
    import json

    keys = [k for k in json.loads(line) if k != "event"]
    order = list(EVENTS["node"].fields)
    assert keys == [k for k in order if k in keys]
