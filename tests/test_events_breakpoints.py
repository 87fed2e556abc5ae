"""Breakpoints are decided by one ``Breakpoints`` (events/breakpoints.py): a live session trips
on the tensors, ``show`` on the recorded summaries, and both say the same words."""

from __future__ import annotations

import math

import pytest
import torch

from backstep.engine.capture.hooks import gradient_trip
from backstep.engine.summary import summarize
from backstep.events.breakpoints import Breakpoints, parse_breakpoint, stopped_event
from backstep.events.spec import EVENTS, check


def _both(specs: list[str], grads: list[torch.Tensor]) -> tuple:
    bp = Breakpoints.from_list([parse_breakpoint(s) for s in specs])
    live = gradient_trip(bp, tuple(grads))
    shown = bp.trip_on_summaries([summarize(g) for g in grads])
    return live, shown


@pytest.mark.parametrize(("specs", "grads", "expected"), [
    (["nonfinite"], [torch.ones(3), torch.tensor([1.0, math.nan, math.inf])],
     ("nonfinite", "grad_inputs[1] has 2 NaN/Inf values")),
    (["norm:10", "norm:1"], [torch.full((4,), 10.0)], ("norm", "grad_inputs[0] norm 20 > 1")),
    (["norm:100"], [torch.full((4,), 10.0)], None),
    (["nonfinite", "norm:1e3"], [torch.ones(2)], None),
])
def test_show_trips_where_and_as_a_live_session_does(specs: list[str], grads: list,
                                                     expected: tuple | None) -> None:
    live, shown = _both(specs, grads)
    assert live == shown == expected


def test_node_rules_are_the_live_ones() -> None:
    bp = Breakpoints.from_list([parse_breakpoint(s) for s in
                                ("leaf:w", "model.enc.*", "Mul*", "node:Add*")])
    assert bp.match_node("MulBackward0", "model.enc.0", None) == "node Mul*"
    assert bp.match_node("SumBackward0", "model.enc.0", None) == "module model.enc.*"
    assert bp.match_node("torch::autograd::AccumulateGrad", None, "w") == "leaf w"
    assert bp.match_node("SumBackward0", "model.dec", "v") is None


def test_the_stopped_event_fits_the_spec_in_its_order() -> None:
    event = stopped_event(1, 2, 3, "MulBackward0", "norm", "grad_inputs[0] norm 20 > 1", [],
                          [], after=True, grad_inputs=[], thread="MainThread", stop=4)
    assert check(event) is None
    assert [k for k in event if k != "event"] == list(EVENTS["stopped"].fields)
