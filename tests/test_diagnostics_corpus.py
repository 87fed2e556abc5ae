"""The diagnostics regression corpus: common training patterns where no diagnosis may fire
(``clean_*``: a false positive is worse than a miss) and seeded bugs where each must
(``bug_*``, with ``# expect:`` markers as in tests/pitfalls). Each script runs in-process as
``backstep trace`` runs it; the diagnoses must be exactly the expected ones."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.optim import optimizer as optimizer_module

from backstep.engine.capture import Capture
from backstep.engine.diagnostics import Diagnostician
from backstep.engine.recorder import ListRecorder
from tests.pitfall_runs import PITFALLS, check_script, diagnose, expectations

CORPUS = Path(__file__).parent / "corpus"
SCRIPTS = sorted(CORPUS.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_corpus(script: Path) -> None:
    expected, _ = expectations(script)
    assert bool(expected) == script.stem.startswith("bug_"), "bug_ scripts expect, clean_ not"
    check_script(script)


def test_reports_that_wait_for_more_passes_come_before_the_exit() -> None:
    """A single backward leaves an unused layer waiting for a later pass to give it a
    gradient; none comes, so the report is made when the script ends, before ``exit``."""
    events = diagnose(PITFALLS / "unused_layer.py")
    assert [e["event"] for e in events][-2:] == ["diagnosis", "exit"]
    assert events[-2]["kind"] == "grad_none" and events[-2]["pass"] == 1


def test_the_step_hook_keeps_no_tensor_alive_and_goes_with_the_session() -> None:
    hooks = optimizer_module._global_optimizer_pre_hooks
    count = len(hooks)
    recorder = ListRecorder()
    doctor = Diagnostician(recorder)
    capture = Capture(doctor)
    doctor.install()
    capture.install()
    try:
        model = nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(torch.ones(1, 2)).sum().backward()  # no zero_grad: the bug
            optimizer.step()
        assert len(hooks) == count + 1
        param, grad = weakref.ref(model.weight), weakref.ref(model.weight.grad)
        del model, optimizer
        gc.collect()
        assert param() is None and grad() is None
    finally:
        capture.uninstall()
        doctor.uninstall()
    assert len(hooks) == count
    assert [d["kind"] for d in recorder.of("diagnosis")] == ["grad_accumulating"]


def test_every_kind_has_a_seeded_bug() -> None:
    """The bug half of the corpus (here and in tests/pitfalls) seeds every diagnosis kind."""
    kinds = {kind for script in [*SCRIPTS, *PITFALLS.glob("*.py")]
             for kind, _, _ in expectations(script)[0]}
    assert kinds == {"graph_freed", "inplace_modified", "nonfinite", "grad_accumulating",
                     "retain_graph_unused", "grad_none", "graph_kept_alive"}
