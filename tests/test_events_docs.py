"""The event format is stated once (``backstep/events/spec.py``): docs/trace.md lists exactly its
events and fields, and every event the code builds is one the spec knows."""

from __future__ import annotations

import ast
import json
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


def _in_order(keys: list[str], order: list[str]) -> bool:
    """``keys`` are known to the spec and come in its order (unknown keys are an error too)."""
    return set(keys) <= set(order) and keys == [k for k in order if k in keys]


def test_a_recorded_trace_writes_every_key_in_the_spec_s_order(tmp_path: Path) -> None:
    """What the recorder writes (events, summaries, saved tensors, graph nodes: the texts the
    hot path builds by hand included) has the spec's fields in the spec's order, and nothing
    the spec does not know: the fast node reader and docs/trace.md read the spec."""
    from backstep.events.spec import GRAPH_NODE, SAVED_ENTRY, SUMMARY
    from tests.replay_traces import record

    trace = record(tmp_path, "t", """
        import torch
        x = torch.randn(3, requires_grad=True)
        w = torch.randn(3, 3, requires_grad=True)
        for _ in range(2):
            y = (w @ x.sin()).relu().log()  # NaN where relu gives 0
            y.sum().backward()
            v = w.clone(); v.mul_(2)
        print("done")
    """)
    seen = set()
    for line in trace.read_text().splitlines():
        event = json.loads(line)
        kind = event.pop("event")
        seen.add(kind)
        extra = {"pass_begin": ["sources"]}.get(kind, [])  # the file form's source table
        assert _in_order([k for k in event if k not in extra], list(EVENTS[kind].fields)), line
        for key in ("grad_outputs", "grad_inputs"):
            for summary in event.get(key) or []:
                assert summary is None or _in_order(list(summary), list(SUMMARY.fields)), line
        for entry in event.get("saved") or []:
            assert _in_order(list(entry), list(SAVED_ENTRY.fields)), line
        for key in ("before", "after"):
            if kind == "accumulate" and event.get(key) is not None:
                assert _in_order(list(event[key]), list(SUMMARY.fields)), line
        for node in event.get("nodes") or []:
            assert _in_order(list(node), list(GRAPH_NODE.fields)), line
    assert {"session", "pass_begin", "node", "accumulate", "pass_end", "exit"} <= seen


def test_the_spec_s_fields_are_in_the_recorder_s_key_order() -> None:
    """A node event as the recorder writes it has its keys in the spec's order (the fast reader,
    ``tui/state/node_line``, builds its grammar from that order)."""
    from backstep.events.text import node_text

    line = node_text(1, 2, 3, '"MulBackward0"', "[]", "[]", "[]", "t")
    assert line is not None
    keys = [k for k in json.loads(line) if k != "event"]
    order = list(EVENTS["node"].fields)
    assert keys == [k for k in order if k in keys]
