"""Gradient breakpoints checked on the device: no read per node, and a stop that names the
node where the NaN was born even when it is found a few nodes later.

``device_checks.FORCE`` sends CPU tensors down the deferred path and ``EVENT`` supplies events
that stay "not ready" for a chosen number of polls, as a busy GPU's would.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backstep.engine import device_checks, transfers
from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import AutoStepper, captured


class Late:
    """Events of a GPU running ``delay`` nodes behind: each completes once ``delay`` more checks
    have been queued after it (or when waited for)."""

    def __init__(self, delay: int) -> None:
        self.delay = delay
        self.now = 0

    def __call__(self) -> Event:
        self.now += 1
        return Event(self, self.now + self.delay)


class Event:
    def __init__(self, clock: Late, due: int) -> None:
        self.clock = clock
        self.due = due
        self.waited = False

    def query(self) -> bool:
        return self.clock.now >= self.due or self.waited

    def synchronize(self) -> None:
        self.waited = True


@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(device_checks, "FORCE", True)
    yield


def build() -> tuple[torch.Tensor, torch.Tensor]:
    """NaN born in SqrtBackward0 (0 / sqrt(negative)); three computing nodes follow it."""
    x = torch.tensor([-1.0, 4.0], requires_grad=True)
    y = ((x * 3) + 1) * 0.5
    return x, torch.where(y > 0, y.sqrt(), torch.zeros_like(y)).sum()


def stops_of(breakpoints: list[dict[str, Any]] | None = None) -> tuple[list[dict], torch.Tensor]:
    stepper = AutoStepper("continue", breakpoints=breakpoints or [{"kind": "nonfinite"}],
                          stop_at_pass_start=False)
    with captured(Capture(ListRecorder(), stepper.controller, record=False)):
        x, loss = build()
        loss.backward()
    return [e for e in stepper.events if e["event"] == "stopped"], x


def test_a_late_check_names_the_node_where_the_nan_was_born(
        deferred: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_checks, "EVENT", Late(2))
    stops, x = stops_of()
    first = stops[0]
    assert (first["name"], first["reason"], first["after"], first["step"]) == (
        "SqrtBackward0", "nonfinite", True, 3)
    assert first["detail"] == ("grad_inputs[0] has 1 NaN/Inf values; born at SqrtBackward0 "
                               "(step 3), 2 nodes ago")
    assert first["grad_inputs"][0]["nonfinite"] == 1, "the gradients shown are the born node's"
    assert first["grad_outputs"][0]["values"] == [0.0, 1.0]
    plain, loss = build()
    loss.backward()
    assert torch.isnan(x.grad[0]) and x.grad[1] == plain.grad[1], "the pass ran as without us"


def test_checks_still_in_flight_are_read_at_pass_end(
        deferred: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_checks, "EVENT", Late(1000))
    before = transfers.count()
    stops, _ = stops_of()
    assert stops[0]["name"] == "SqrtBackward0" and stops[0]["step"] == 3
    assert stops[0]["detail"].endswith("born at SqrtBackward0 (step 3), 4 nodes ago")
    assert transfers.count() - before >= 1, "the pass end waits for the checks"


def test_too_many_checks_in_flight_wait_for_the_oldest(
        deferred: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_checks, "EVENT", Late(1000))
    monkeypatch.setattr(device_checks, "MAX_PENDING", 1)
    stops, _ = stops_of()
    assert stops[0]["detail"].endswith("born at SqrtBackward0 (step 3), 1 node ago")


def test_a_ready_check_stops_at_once_like_the_cpu_path(deferred: None) -> None:
    stops, _ = stops_of()
    assert stops[0]["name"] == "SqrtBackward0"
    assert stops[0]["detail"] == "grad_inputs[0] has 1 NaN/Inf values"


def test_norm_breakpoints_are_deferred_too(deferred: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_checks, "EVENT", Late(1))
    stops, _ = stops_of([{"kind": "norm", "above": 1e6}])
    assert (stops[0]["name"], stops[0]["reason"]) == ("SqrtBackward0", "norm")
    assert stops[0]["detail"].startswith("grad_inputs[0] norm nan > 1e+06; born at SqrtBackward0")


def test_a_clean_pass_reads_nothing(deferred: None) -> None:
    stepper = AutoStepper("continue", breakpoints=[{"kind": "nonfinite"}],
                          stop_at_pass_start=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(20)])
    loss = model(torch.randn(4, 16)).pow(2).mean()
    with captured(Capture(None, stepper.controller, record=False)):
        before = transfers.count()
        loss.backward()
        assert transfers.count() == before
    assert not [e for e in stepper.events if e["event"] == "stopped"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_nonfinite_checks_make_no_sync_per_node() -> None:
    stepper = AutoStepper("continue", breakpoints=[{"kind": "nonfinite"}],
                          stop_at_pass_start=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(50)]).cuda()
    loss = model(torch.randn(8, 64, device="cuda")).pow(2).mean()
    with captured(Capture(None, stepper.controller, record=False)), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            loss.backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert len([w for w in caught if "synchroniz" in str(w.message)]) <= 1
    x = torch.tensor([-1.0, 4.0], device="cuda", requires_grad=True)
    stepper.events.clear()
    with captured(Capture(None, stepper.controller, record=False)):
        torch.where(x > 0, x.sqrt(), torch.zeros_like(x)).sum().backward()
    stops = [e for e in stepper.events if e["event"] == "stopped"]
    assert stops and stops[0]["name"] == "SqrtBackward0" and math.isnan(x.grad[0].item())
