"""``retain_graph_unused`` blames only a retain_graph=True that the user's own line passed, and
judges a call site over all its passes (truncated BPTT: each graph's last pass is not followed
by another, but the site's earlier ones were)."""

from __future__ import annotations

from typing import Any

import torch

from backstep.engine.capture import Capture
from backstep.engine.diagnostics import Diagnostician
from backstep.engine.diagnostics.rules import EventRules
from backstep.engine.recorder import ListRecorder

SITE = {"file": "t.py", "line": 9, "code": "s.backward(retain_graph=True)"}


def _begin(number: int, nodes: list[int], **extra: Any) -> dict[str, Any]:
    return {"event": "pass_begin", "pass": number, "retain_graph": True, "caller": SITE,
            "roots": nodes[:1], "nodes": [{"id": i, "name": "MulBackward0"} for i in nodes],
            **extra}


def test_a_site_whose_earlier_pass_was_gone_back_through_is_not_blamed() -> None:
    rules = EventRules()
    rules.feed(_begin(1, [10, 11]))
    rules.feed({"event": "pass_end", "pass": 1})
    # pass 2 (same line, another graph) is released unused before anything reuses pass 1's
    rules.feed(_begin(2, [20]))
    rules.feed({"event": "pass_end", "pass": 2})
    assert rules.feed({"event": "graph_released", "pass": 2, "bytes": 8}) == []
    rules.feed(_begin(3, [11]))  # goes back through pass 1's graph: the site needed it
    rules.feed({"event": "pass_end", "pass": 3})
    assert rules.feed({"event": "graph_released", "pass": 3, "bytes": 8}) == []
    assert rules.finish() == []
    assert rules.feed({"event": "graph_released", "pass": 1, "bytes": 8}) == []


def test_a_site_never_gone_back_through_is_reported_once_at_the_end() -> None:
    rules = EventRules()
    for number in (1, 2, 3):
        rules.feed(_begin(number, [number * 10]))
        rules.feed({"event": "pass_end", "pass": number})
        assert rules.feed({"event": "graph_released", "pass": number, "bytes": 8}) == []
    (found,) = rules.finish()
    assert found[1]["kind"] == "retain_graph_unused" and found[1]["pass"] == 1
    rules.feed(_begin(4, [40]))  # after the end: judged at once
    assert [d["kind"] for _, d in rules.feed({"event": "graph_released", "pass": 4})] == [
        "retain_graph_unused"]


def test_a_retain_graph_passed_by_torch_is_not_watched() -> None:
    rules = EventRules()
    rules.feed(_begin(1, [10], retain_graph_by={"file": "functional.py", "line": 1}))
    rules.feed({"event": "pass_end", "pass": 1})
    assert rules.feed({"event": "graph_released", "pass": 1, "bytes": 8}) == []
    assert rules.finish() == []


def _passes(run: Any) -> list[dict[str, Any]]:
    recorder = ListRecorder()
    doctor = Diagnostician(recorder)
    capture = Capture(doctor)
    capture.install()
    try:
        run()
    finally:
        capture.uninstall()
    return recorder.of("pass_begin")


def test_capture_says_who_passed_retain_graph() -> None:
    x = torch.randn(3, requires_grad=True)

    def jacobian() -> None:
        torch.autograd.functional.jacobian(lambda t: t.tanh(), x)

    begins = _passes(jacobian)
    assert begins and all(b["retain_graph"] for b in begins)
    assert all(b["retain_graph_by"]["file"].endswith("functional.py") for b in begins)

    def mine() -> None:
        y = (x * 2).sum()
        y.backward(retain_graph=True)
        torch.autograd.grad(y, x, retain_graph=True)
        y.backward()

    begins = _passes(mine)
    assert [b["retain_graph"] for b in begins] == [True, True, False]
    assert not any("retain_graph_by" in b for b in begins)
