"""Nothing of a recorded pass outlives it: the forward after a recorded backward runs as the one
after a plain backward does (no mode, hook, profiler or collector state left behind). The cost of
that forward is measured in benchmarks/bench_engine.py ("forward after trace"), never timed here."""

from __future__ import annotations

import collections
import gc
import io
import sys
from typing import Any

import torch
from torch import nn

from backstep.engine.capture import Capture
from backstep.engine.diagnostics import Diagnostician
from backstep.engine.recorder import JsonlRecorder


def _model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False), torch.randn(2, 4, 16)


def _state() -> dict[str, Any]:
    return {
        "gc enabled": gc.isenabled(),
        "gc frozen": gc.get_freeze_count(),
        "gc thresholds": gc.get_threshold(),
        "torch function modes": torch._C._len_torch_function_stack(),
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "trace": sys.gettrace(),
        "profile": sys.getprofile(),
        "grad mode": torch.is_grad_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
    }


def _forward_calls(model: nn.Module, x: torch.Tensor) -> collections.Counter:
    """The Python functions a forward calls, with their counts."""
    calls: collections.Counter = collections.Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[(frame.f_code.co_filename, frame.f_code.co_name)] += 1

    sys.setprofile(profile)
    try:
        model(x).pow(2).mean()
    finally:
        sys.setprofile(None)
    return calls


def test_a_forward_after_a_recorded_backward_runs_as_after_a_plain_one() -> None:
    model, x = _model()
    before = _state()
    model(x).pow(2).mean().backward()
    after_plain = _forward_calls(model, x)
    capture = Capture(Diagnostician(JsonlRecorder(io.BytesIO())))
    capture.install()
    try:
        model(x).pow(2).mean().backward()
        assert capture.passes == 1
        assert _state() == before
        after_trace = _forward_calls(model, x)
    finally:
        capture.uninstall()
    assert after_trace == after_plain
    assert _state() == before
