"""Provenance's fast paths on tiny passes: each must give exactly what the slow path gives.

``annotate`` skips its walk until some node got a span or a Region (``provenance_scopes.wide``);
the flag starts False in a fresh interpreter, so the cases that must set it run in one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

from backstep.engine.provenance import scopes as provenance_scopes
from backstep.engine.provenance.tagging import annotate


class _Untouchable:
    """A root that fails the moment annotate looks at it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"annotate walked the graph (read {name})")

    def __hash__(self) -> int:
        raise AssertionError("annotate walked the graph (hashed a node)")


def test_annotate_skips_the_walk_until_a_node_has_a_span_or_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(provenance_scopes, "wide", False)
    assert annotate([_Untouchable()]) == 0
    monkeypatch.setattr(provenance_scopes, "wide", True)
    with pytest.raises(AssertionError, match="walked"):
        annotate([_Untouchable()])


def _fresh(body: str) -> str:
    """Run ``body`` in a fresh interpreter (``wide`` still False there); its stdout."""
    script = textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


_PREAMBLE = """
    import torch
    from backstep.engine.provenance import Provenance, annotate, source_of, module_of
    from backstep.engine.provenance import scopes
    assert scopes.wide is False
"""


def test_a_call_that_makes_several_nodes_turns_annotate_on() -> None:
    out = _fresh(_PREAMBLE + """
    x = torch.randn(3, 4, requires_grad=True)
    y = torch.randn(3, 4)
    with Provenance():
        z = torch.cosine_similarity(x, y)  # several nodes: a span
    inner = z.grad_fn.next_functions[0][0]
    assert source_of(inner) is None  # not handed down yet
    print(annotate([z.grad_fn]) > 0, source_of(inner) == source_of(z.grad_fn) is not None,
          source_of(inner)["line"])
    """)
    assert out.split() == ["True", "True", "10"]  # the cosine_similarity line


def test_a_library_module_turns_annotate_on() -> None:
    out = _fresh(_PREAMBLE + """
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with Provenance():
        out = net(torch.randn(2, 4))  # a region: its inner nodes get their Scope in annotate
    print(annotate([out.grad_fn]) > 0)
    node, paths = out.grad_fn, set()
    while node is not None:
        paths.add(module_of(node))
        node = next((p for p, _ in node.next_functions
                     if p is not None and type(p).__name__ != "AccumulateGrad"), None)
    print(sorted(p for p in paths if p))
    """)
    assert out.splitlines() == ["True", "['net.0', 'net.1', 'net.2']"]


def test_tiny_pass_tags_unchanged_by_the_skipped_walk() -> None:
    a = torch.full((), 0.5, requires_grad=True)
    x = torch.linspace(-1.0, 1.0, 8)
    from backstep.engine.provenance import Provenance, source_of

    with Provenance():
        loss = (a + a * x).pow(2).sum()
    annotate([loss.grad_fn])
    node, lines = loss.grad_fn, []
    while node is not None and type(node).__name__ != "AccumulateGrad":
        lines.append((source_of(node) or {}).get("code"))
        node = node.next_functions[0][0]
    assert lines == ["loss = (a + a * x).pow(2).sum()"] * 3


# -- find_source: the user line looked up by (code, instruction offset) -------------------------


def _lines_of(node: Any) -> list[int | None]:
    from backstep.engine.provenance import source_of

    lines = []
    while node is not None and type(node).__name__ != "AccumulateGrad":
        lines.append((source_of(node) or {}).get("line"))
        node = node.next_functions[0][0]
    return lines


def _three_lines(a: torch.Tensor) -> torch.Tensor:
    b = a * 2  # line +1
    c = b * 3  # line +2
    return c * 4  # line +3


def test_ops_on_different_lines_of_one_function_keep_their_lines() -> None:
    from backstep.engine.provenance import Provenance

    first = _three_lines.__code__.co_firstlineno
    a = torch.ones(2, requires_grad=True)
    with Provenance():
        outs = [_three_lines(a) for _ in range(3)]  # the same offsets again: from the cache
    for out in outs:
        assert _lines_of(out.grad_fn) == [first + 3, first + 2, first + 1]


def test_a_traced_frame_reads_its_line_the_slow_way() -> None:
    from backstep.engine.provenance import Provenance
    from backstep.engine.provenance import frames as provenance_frames

    first = _three_lines.__code__.co_firstlineno
    a = torch.ones(2, requires_grad=True)

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return tracer if frame.f_code is _three_lines.__code__ else None

    with Provenance():
        sys.settrace(tracer)
        try:
            out = _three_lines(a)
        finally:
            sys.settrace(None)
        assert not any(code is _three_lines.__code__
                       for code, _ in provenance_frames._at_offset.values())
        _three_lines(a)  # untraced: cached now
        cached = provenance_frames._at_offset
        assert any(code is _three_lines.__code__ for code, _ in cached.values())
        wrong = {"file": "elsewhere.py", "line": 1, "code": "x"}
        for key, (code, _) in list(cached.items()):
            cached[key] = (code, wrong)
        sys.settrace(tracer)
        try:
            again = _three_lines(a)  # traced: the (wrong) cache is not read
        finally:
            sys.settrace(None)
    assert _lines_of(out.grad_fn) == [first + 3, first + 2, first + 1]
    assert _lines_of(again.grad_fn) == [first + 3, first + 2, first + 1]


def test_uninstall_lets_go_of_the_cached_code_objects() -> None:
    from backstep.engine.provenance import Provenance
    from backstep.engine.provenance import frames as provenance_frames

    with Provenance():
        _three_lines(torch.ones(2, requires_grad=True))
        assert provenance_frames._at_offset
    assert not provenance_frames._at_offset


def test_an_offset_entry_of_another_code_object_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An id reused by a new code object after the old one died must not give the old line."""
    from backstep.engine.provenance import frames as provenance_frames

    wrong = {"file": "elsewhere.py", "line": 1, "code": "x"}

    class OtherCode(dict):  # every offset answers with another code object's entry
        def get(self, key: Any, default: Any = None) -> Any:
            return (_three_lines.__code__, wrong)

    monkeypatch.setattr(provenance_frames, "_at_offset", OtherCode())
    line = sys._getframe().f_lineno + 1
    found = provenance_frames.find_source(sys._getframe(), [])
    assert found is not None and found["line"] == line
