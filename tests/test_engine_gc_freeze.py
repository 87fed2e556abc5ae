"""A recorded pass freezes the collector once, however passes nest or overlap on threads.

The freeze itself is measured in benchmarks (bench_engine.py, bench_corpus.py); here: who holds
it, and that no pass asks ``gc.get_freeze_count()`` (a walk of every frozen object) while one of
backstep's own freezes is in place.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from backstep.engine.capture import Capture
from backstep.engine.capture.passes import PASS_GC_THRESHOLD
from backstep.engine.recorder import ListRecorder


@pytest.fixture
def freeze_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every answer ``gc.get_freeze_count()`` gives while the test runs."""
    answers: list[int] = []
    real = gc.get_freeze_count

    def counted() -> int:
        answers.append(real())
        return answers[-1]

    monkeypatch.setattr(gc, "get_freeze_count", counted)
    return answers


def _recording() -> tuple[Capture, ListRecorder]:
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.install()
    return capture, recorder


def test_a_nested_pass_keeps_the_outer_freeze_and_never_counts_frozen_objects(
    freeze_counts: list[int],
) -> None:
    before = gc.get_threshold()
    thresholds: list[tuple[str, int]] = []
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    capture, recorder = _recording()
    try:
        for _ in range(3):
            h = x.exp()
            h.register_hook(lambda g: thresholds.append(("outer, after nested",
                                                         gc.get_threshold()[0])))

            def block(t: torch.Tensor) -> torch.Tensor:
                out = layer(t).tanh()
                if out.requires_grad:  # the recompute, inside the nested pass
                    out.register_hook(lambda g: thresholds.append(("nested", gc.get_threshold()[0])))
                return out

            checkpoint(block, h, use_reentrant=True).sum().backward()
    finally:
        capture.uninstall()
    passes = [e for e in recorder.events if e["event"] == "pass_begin"]
    assert [e["parent"] is not None for e in passes] == [False, True] * 3
    assert len(freeze_counts) == 3  # one look per outer pass, none inside it
    assert thresholds and all(value == PASS_GC_THRESHOLD for _, value in thresholds)
    assert {where for where, _ in thresholds} == {"nested", "outer, after nested"}
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_pass_on_another_thread_leaves_the_freeze_to_the_pass_that_made_it(
    freeze_counts: list[int],
) -> None:
    """Pass B runs on another thread while pass A holds the freeze: B neither asks how many
    objects are frozen nor thaws them under A; A's end thaws."""
    before = gc.get_threshold()
    a_inside, b_ended = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def pass_a() -> None:
        x = torch.randn(3, requires_grad=True)
        y = x.exp()

        def hook(g: torch.Tensor) -> None:
            a_inside.set()
            b_ended.wait(10)
            seen["after b"] = gc.get_threshold()[0]

        y.register_hook(hook)
        y.sum().backward()

    def pass_b() -> None:
        x = torch.randn(3, requires_grad=True)
        x.exp().sum().backward()
        b_ended.set()

    capture, recorder = _recording()
    try:
        thread_a = threading.Thread(target=pass_a)
        thread_a.start()
        assert a_inside.wait(10)  # A's pass has begun, and frozen the heap
        thread_b = threading.Thread(target=pass_b)
        thread_b.start()
        thread_b.join(20)
        thread_a.join(20)
    finally:
        capture.uninstall()
    assert b_ended.is_set() and seen["after b"] == PASS_GC_THRESHOLD
    assert len([e for e in recorder.events if e["event"] == "pass_end"]) == 2
    assert freeze_counts == [0]  # A's look, before it froze; none from B
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_objects_the_program_froze_itself_stay_frozen() -> None:
    """backstep never unfreezes what the program froze: the program's own object stays in the
    permanent generation (``gc.get_objects()`` leaves those out), and so does the rest of the
    frozen heap (arming a capture lets go of a few of backstep's own objects: its last
    session's id counter)."""
    mine = [["the program's own"]]
    gc.freeze()
    try:
        held = gc.get_freeze_count()
        capture, _ = _recording()
        try:
            torch.randn(3, requires_grad=True).exp().sum().backward()
        finally:
            capture.uninstall()
        assert not any(o is mine[0] for o in gc.get_objects())
        assert held - 64 <= gc.get_freeze_count() <= held
    finally:
        gc.unfreeze()


def test_a_live_pass_registers_its_hooks_with_the_collector_frozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The live UI's stepping pass hooks every node before it records: registering two hooks per
    node with the collector running walked the whole heap again and again (0.2 s of CPU on a
    6,380-node pass, ten times what a trace spends on its hooks)."""
    from backstep.engine.capture import hooks
    from backstep.engine.capture import passes as passes_module
    from backstep.engine.controller import Controller

    seen: list[bool] = []
    real = hooks.Hooks._ensure_hooks

    def ensure(self: Any, p: Any, pre: bool, post: bool) -> None:
        seen.append(passes_module._OWNER is not None and gc.get_threshold()[0] == PASS_GC_THRESHOLD)
        real(self, p, pre, post)

    monkeypatch.setattr(hooks.Hooks, "_ensure_hooks", ensure)
    before = gc.get_threshold()
    controller: Controller

    def answer(event: dict[str, Any]) -> None:
        if event["event"] == "stopped":
            controller.feed({"cmd": "continue"})

    controller = Controller(answer, stop_at_pass_start=True)
    capture = Capture(None, controller, record=False)
    capture.install()
    try:
        w = torch.ones(3, requires_grad=True)
        (w * 2).sum().backward()
    finally:
        capture.uninstall()
    assert seen and seen[0]
    assert torch.equal(w.grad, torch.full((3,), 2.0))
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
