"""A 0-dim saved tensor on the CPU (a wrapped scalar such as ``-0.5``) is recorded with its value,
checked against what PyTorch saved; bigger tensors are recorded as before, with no value."""

from __future__ import annotations

from typing import Any

import torch

from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from backstep.engine.saved import saved_record, saved_status
from tests.engine_fixtures import captured


def record(fn: Any) -> ListRecorder:
    recorder = ListRecorder()
    with captured(Capture(recorder, record=True)):
        fn()
    return recorder


def saved_of(recorder: ListRecorder, name: str) -> list[dict[str, Any]]:
    return next(e["saved"] for e in recorder.of("node") if e["name"] == name)


def test_a_wrapped_scalar_is_recorded_with_its_value() -> None:
    x = torch.randn(3, requires_grad=True)
    y = x * -0.5
    other = y.grad_fn._saved_other  # what PyTorch saved: a 0-dim tensor
    assert other.dim() == 0 and other.item() == -0.5
    entry = next(s for s in saved_status(y.grad_fn) if s["name"] == "other")
    assert entry["status"] == "alive" and entry["shape"] == [] and entry["value"] == -0.5
    (entries, _), (again, _) = saved_record(y.grad_fn), saved_record((x * -0.25).grad_fn)
    # the cached records are told apart by the value
    assert [s.get("value") for s in entries] == [-0.5, None]
    assert [s.get("value") for s in again] == [-0.25, None]

    def run() -> None:
        (x * torch.tensor(-0.25)).sum().backward()

    saved = saved_of(record(run), "MulBackward0")
    assert {s["name"]: s.get("value") for s in saved} == {"other": -0.25, "self": None}


def test_tensors_with_a_shape_have_no_value() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 2, requires_grad=True)
    entries, _ = saved_record((x @ w).grad_fn)
    assert entries and all("value" not in s for s in entries if s["status"] == "alive")
