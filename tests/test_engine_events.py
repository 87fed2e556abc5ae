"""What the engine records and how the controller stops, checked against plain PyTorch."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from backstep.engine.capture import Capture
from backstep.engine.controller import BackstepAbort, Controller
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import AutoStepper, captured, nodes_of, record
from tests.engine_models import TwoPart
from tests.torch_features import needs_saved_data, seen


def test_graph_basics_events() -> None:
    def run() -> None:
        x = torch.tensor(2.0, requires_grad=True)
        y = torch.tensor(3.0, requires_grad=True)
        out = (x * y + x) ** 2
        out.backward()

    rec = record(run)
    (begin,) = rec.of("pass_begin")
    assert begin["api"] == "backward" and begin["parent"] is None
    names = {n["name"] for n in begin["nodes"]}
    assert names == {"PowBackward0", "AddBackward0", "MulBackward0", "AccumulateGrad"}
    assert {n["leaf"] for n in begin["nodes"] if n["leaf"]} == {"x", "y"}
    steps = [(e["step"], e["name"]) for e in nodes_of(rec)]
    assert steps[:3] == [(1, "PowBackward0"), (2, "AddBackward0"), (3, "MulBackward0")]
    assert nodes_of(rec)[0]["grad_outputs"][0]["values"] == [1.0]
    assert nodes_of(rec)[0]["grad_inputs"][0]["values"] == [16.0]
    pow_saved = nodes_of(rec)[0]["saved"]
    assert {s["name"]: s["status"] for s in pow_saved} == {"self": seen("alive"), "exponent": "scalar"}
    acc = {e["leaf"]: e for e in rec.of("accumulate")}
    assert acc["x"]["before"] is None and acc["x"]["after"]["values"] == [64.0]
    assert acc["y"]["after"]["values"] == [32.0]
    assert rec.of("pass_end")[0] == {
        "event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []
    }


def test_ids_stable_across_retained_passes_and_before_after() -> None:
    def run() -> None:
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        loss = (w * w).sum()
        loss.backward(retain_graph=True)
        loss.backward()

    rec = record(run)
    first, second = rec.of("pass_begin")
    assert [n["id"] for n in first["nodes"]] == [n["id"] for n in second["nodes"]]
    assert first["retain_graph"] is True and second["retain_graph"] is False
    acc = rec.of("accumulate")
    assert acc[0]["before"] is None and acc[0]["after"]["values"] == [2.0, 4.0]
    assert acc[1]["before"]["values"] == [2.0, 4.0] and acc[1]["after"]["values"] == [4.0, 8.0]


def test_backward_twice_names_the_node_and_freed_buffers() -> None:
    def run() -> None:
        x = torch.ones(3, requires_grad=True)
        y = (x.exp() * x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()

    rec = record(run)
    end = rec.of("pass_end")[1]
    assert end["status"] == "error" and "second time" in end["error"]
    failed = [e for e in nodes_of(rec, 2) if e["error"]]
    assert [e["name"] for e in failed] == ["MulBackward0"]
    assert {s["name"]: s["status"] for s in failed[0]["saved"]} == {"self": seen("freed"),
                                                             "other": seen("freed")}
    assert [e["name"] for e in nodes_of(rec, 2) if not e["error"]] == ["SumBackward0"]
    mul = [e for e in nodes_of(rec, 1) if e["name"] == "MulBackward0"][0]
    assert {s["status"] for s in mul["saved"]} == {seen("alive")}


@needs_saved_data
def test_inplace_modified_before_pytorch_raises() -> None:
    def run() -> None:
        a = torch.tensor([1.0, 2.0], requires_grad=True)
        b = a.exp()
        c = b * 2
        b.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace"):
            c.sum().backward()

    rec = record(run)
    failed = [e for e in rec.of("node") if e["error"]]
    assert [e["name"] for e in failed] == ["ExpBackward0"]
    assert "modified by an inplace" in failed[0]["error"]
    (result,) = [s for s in failed[0]["saved"] if s["name"] == "result"]
    assert result["status"] == "modified"
    assert result["version"] == {"saved": 0, "now": 1}
    assert rec.of("pass_end")[0]["status"] == "error"


def test_skipped_nodes_for_inputs_and_autograd_grad() -> None:
    def run() -> None:
        a = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        (a * b).sum().backward(inputs=[a])
        torch.autograd.grad((a * b).sum(), [b])

    rec = record(run)
    first, second = rec.of("pass_begin")
    leaf_ids = {n["leaf"]: n["id"] for n in first["nodes"] if n["leaf"]}
    assert first["inputs"] == [leaf_ids["a"]]
    assert leaf_ids["b"] in rec.of("pass_end")[0]["skipped"]
    assert second["api"] == "grad"
    acc2 = {n["id"] for n in second["nodes"] if n["name"] == "AccumulateGrad"}
    assert acc2 <= set(rec.of("pass_end")[1]["skipped"])
    assert not [e for e in rec.of("accumulate") if e["pass"] == 2]


def test_nested_passes_have_a_parent() -> None:
    def run() -> None:
        block = nn.Linear(3, 3)
        x = torch.randn(2, 3, requires_grad=True)
        checkpoint(block, x, use_reentrant=True).sum().backward()

    rec = record(run)
    begins = rec.of("pass_begin")
    assert len(begins) == 2
    assert begins[0]["parent"] is None and begins[1]["parent"] == 1
    assert any(n["name"] == "CheckpointFunctionBackward" for n in begins[0]["nodes"])
    assert [e["pass"] for e in rec.of("pass_end")] == [2, 1]


def test_retain_grad_and_custom_function_saved_tensors() -> None:
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):  # type: ignore[override]
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):  # type: ignore[override]
            (a,) = ctx.saved_tensors
            return 2 * a * g

    def run() -> None:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        hidden = x * 3
        hidden.retain_grad()
        Square.apply(hidden).sum().backward()

    rec = record(run)
    retained = [e for e in rec.of("accumulate") if e["retained"]]
    assert [(e["leaf"], e["after"]["values"]) for e in retained] == [("hidden", [6.0, 12.0])]
    square = [e for e in rec.of("node") if e["name"] == "SquareBackward"][0]
    assert [s["name"] for s in square["saved"]] == ["tensors[0]"]


def test_parameter_names_from_module_variables() -> None:
    def run() -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
        data = torch.randn(5, 4)
        model(data).sum().backward()

    rec = record(run)
    leaves = {n["leaf"] for n in rec.of("pass_begin")[0]["nodes"] if n["leaf"]}
    assert leaves == {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}


def test_unnamed_leaf_has_a_readable_fallback() -> None:
    def make() -> torch.Tensor:
        return torch.ones(4, 10, requires_grad=True)

    def run() -> None:
        (make() * 2).sum().backward()

    rec = record(run)
    (leaf,) = [n["leaf"] for n in rec.of("pass_begin")[0]["nodes"] if n["leaf"]]
    assert leaf.startswith("leaf#") and leaf.endswith("(4, 10) float32")


@needs_saved_data  # the test reads .data to see the buffers freed
def test_no_leaks_and_buffers_freed_as_without_backstep() -> None:
    def run() -> tuple[weakref.ref, weakref.ref, Any]:
        w = torch.randn(50, 50, requires_grad=True)
        hidden = (w @ w).tanh()
        loss = hidden.sum()
        node = hidden.grad_fn
        loss.backward()
        freed = node._raw_saved_result.data is None
        return weakref.ref(hidden), weakref.ref(w), freed

    plain = run()
    recorder = ListRecorder()
    with captured(Capture(recorder, AutoStepper().controller, record=True)):
        under = run()
    gc.collect()
    assert plain[0]() is None and under[0]() is None
    assert plain[1]() is None and under[1]() is None
    assert plain[2] is True and under[2] is True


def test_stops_before_each_node_and_serves_tensors() -> None:
    stepper = AutoStepper("step")
    requests: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> None:
        stepper.events.append(event)
        if event["event"] == "stopped" and event["step"] == 2:
            stepper.controller.feed({"cmd": "tensor", "req": 1, "pass": event["pass"],
                                     "node": event["id"], "slot": "grad_outputs", "index": 0})
        elif event["event"] == "tensor":
            requests.append(event)
        if event["event"] == "stopped" or event["event"] == "tensor":
            if event["event"] == "tensor" or event["step"] != 2:
                stepper.controller.feed({"cmd": "step"})

    stepper.controller.emit = emit
    rec = ListRecorder()
    with captured(Capture(rec, stepper.controller, record=False)):
        x = torch.tensor(2.0, requires_grad=True)
        y = torch.tensor(3.0, requires_grad=True)
        ((x * y + x) ** 2).backward()
    stops = [e for e in stepper.events if e["event"] == "stopped"]
    assert [s["name"] for s in stops][:3] == ["PowBackward0", "AddBackward0", "MulBackward0"]
    assert [s["reason"] for s in stops][:2] == ["pass_start", "step"]
    assert requests and requests[0]["values"] == [16.0]
    assert x.grad.item() == 64.0 and y.grad.item() == 32.0


def test_stop_served_from_another_thread_and_detach_releases() -> None:
    events: list[dict[str, Any]] = []
    stopped = threading.Event()

    def emit(event: dict[str, Any]) -> None:
        events.append(event)
        if event["event"] == "stopped":
            stopped.set()

    controller = Controller(emit, stop_at_pass_start=True)
    result: dict[str, Any] = {}
    with captured(Capture(None, controller, record=False)):
        def work() -> None:
            w = torch.ones(3, requires_grad=True)
            (w * 2).sum().backward()
            result["grad"] = w.grad

        worker = threading.Thread(target=work)
        worker.start()
        assert stopped.wait(10)
        controller.feed({"cmd": "detach"})
        worker.join(10)
    assert not worker.is_alive()
    assert torch.equal(result["grad"], torch.full((3,), 2.0))


def test_no_hook_left_behind_blocks_a_later_backward() -> None:
    controller = Controller(lambda e: None, stop_at_pass_start=False,
                            breakpoints=[{"kind": "node", "pattern": "*"}])
    w = torch.ones(3, requires_grad=True)
    loss = (w * 3).sum()
    stepper = AutoStepper("continue")
    with captured(Capture(None, stepper.controller)):
        loss.backward(retain_graph=True)
    # A controller that would never answer is now attached to nothing: the retained graph's
    # old hooks must stay silent.
    done = threading.Event()
    worker = threading.Thread(target=lambda: (loss.backward(), done.set()))
    worker.start()
    worker.join(10)
    assert done.is_set()
    del controller


@pytest.mark.parametrize(
    "breakpoints, expected",
    [
        ([{"kind": "node", "pattern": "Sqrt*"}], ("SqrtBackward0", "breakpoint", False)),
        ([{"kind": "leaf", "name": "x"}], ("AccumulateGrad", "breakpoint", False)),
        ([{"kind": "nonfinite"}], ("SqrtBackward0", "nonfinite", True)),
        ([{"kind": "norm", "above": 1e6}], ("SqrtBackward0", "norm", True)),
    ],
)
def test_breakpoints(breakpoints: list[dict], expected: tuple[str, str, bool]) -> None:
    stepper = AutoStepper("continue", breakpoints=breakpoints, stop_at_pass_start=False)
    rec = ListRecorder()
    with captured(Capture(rec, stepper.controller, record=False)):
        x = torch.tensor([-1.0, 4.0], requires_grad=True)
        torch.where(x > 0, x.sqrt(), torch.zeros_like(x)).sum().backward()
    stops = [e for e in stepper.events if e["event"] == "stopped"]
    assert stops, "the breakpoint must stop the pass"
    assert (stops[0]["name"], stops[0]["reason"], stops[0]["after"]) == expected
    assert len(rec.of("pass_begin")) == 1, "a pass announces its graph at its first stop"
    assert torch.isnan(x.grad[0]) and x.grad[1].item() == 0.25


def test_module_breakpoint_stops_only_inside_the_named_modules() -> None:
    """``backstep run --break 'model.encoder.*'``: the paths come from forward provenance,
    including those inside torch's own modules (named lazily, when the pass asks)."""
    from backstep.engine.provenance import Provenance, annotate
    from backstep.events.breakpoints import parse_breakpoint

    torch.manual_seed(0)
    model = TwoPart()
    x = torch.randn(3, 4)
    with Provenance():
        loss = model(x).pow(2).mean()
    plain = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    breakpoint_spec = parse_breakpoint("model.encoder.*")
    assert breakpoint_spec == {"kind": "module", "pattern": "model.encoder.*"}
    stepper = AutoStepper("continue", breakpoints=[breakpoint_spec], stop_at_pass_start=False)
    rec = ListRecorder()
    capture = Capture(rec, stepper.controller, record=False)
    capture.annotate = annotate  # as the session wires it when provenance is on
    with captured(capture):
        loss.backward()
    stops = [e for e in stepper.events if e["event"] == "stopped"]
    (begin,) = rec.of("pass_begin")
    modules = {n["id"]: n["module"] for n in begin["nodes"]}
    stopped_in = [modules[e["id"]] for e in stops]
    expected = sorted(
        m for n in begin["nodes"]
        if (m := n["module"]) and m.startswith("model.encoder.") and n["name"] != "AccumulateGrad"
    )
    assert {"model.encoder.0", "model.encoder.1", "model.encoder.2"} <= set(expected)
    assert None not in stopped_in
    assert sorted(stopped_in) == expected
    assert all(e["reason"] == "breakpoint" for e in stops)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain, strict=True))


def test_finish_and_abort() -> None:
    stepper = AutoStepper("finish")
    with captured(Capture(None, stepper.controller)):
        w = torch.ones(2, requires_grad=True)
        (w * w).sum().backward()
    assert len([e for e in stepper.events if e["event"] == "stopped"]) == 1
    aborter = AutoStepper("abort")
    with captured(Capture(None, aborter.controller)):
        v = torch.ones(2, requires_grad=True)
        with pytest.raises(BackstepAbort):
            (v * v).sum().backward()
    assert v.grad is None


def test_nothing_can_stop_installs_nothing() -> None:
    controller = Controller(lambda e: None, stop_at_pass_start=False)
    capture = Capture(None, controller)
    with captured(capture):
        w = torch.ones(2, requires_grad=True)
        (w * w).sum().backward()
    assert capture.passes == 1 and not capture._live


def test_garbage_commands_get_errors() -> None:
    events: list[dict[str, Any]] = []
    controller = Controller(events.append)
    for bad in ({"cmd": "launch"}, {"nope": 1}, {"cmd": "tensor", "req": "x"},
                {"cmd": "break", "breakpoints": [{"kind": "norm"}]}, {"cmd": "step"}):
        controller.feed(bad)
    assert [e["event"] for e in events] == ["error"] * 5


def test_summaries_shown_at_a_stop_carry_a_histogram() -> None:
    from backstep.engine.summary import summarize

    stepper = AutoStepper("continue", stop_at_pass_start=True)
    with captured(Capture(None, stepper.controller, record=False)):
        w = torch.linspace(-1, 1, 100, requires_grad=True)
        (w * w).sum().backward()
    stop = [e for e in stepper.events if e["event"] == "stopped"][0]
    assert stop["grad_outputs"][0].get("hist") is None  # a 0-dim seed: its value is shown instead
    summary = summarize(torch.linspace(-1, 1, 100), hist=True)
    assert summary is not None and sum(summary["hist"]) == 100 and len(summary["hist"]) == 24
    nan = summarize(torch.tensor([1.0, float("nan"), 3.0, 2.0] * 10), hist=True)
    assert nan is not None and sum(nan["hist"]) == 30 and nan["nonfinite"] == 10


@pytest.mark.parametrize("case", ["twice", pytest.param("inplace", marks=needs_saved_data)])
def test_errors_in_passes_without_hooks_are_still_explained(case: str) -> None:
    controller = Controller(lambda e: None, stop_at_pass_start=False)  # nothing can stop
    rec = ListRecorder()
    with captured(Capture(rec, controller, record=False)):
        a = torch.tensor([1.0, 2.0], requires_grad=True)
        b = a.exp()
        c = (b * 2).sum()
        if case == "twice":
            c.backward()
        else:
            b.add_(1)
        with pytest.raises(RuntimeError):
            c.backward()
    (failed,) = [e for e in rec.of("node") if e["error"]]
    statuses = {s["name"]: s["status"] for s in failed["saved"]}
    if case == "twice":
        assert failed["name"] == "MulBackward0" and seen("freed") in statuses.values()
    else:
        assert failed["name"] == "ExpBackward0" and statuses["result"] == "modified"
    assert rec.of("pass_end")[-1]["status"] == "error"
    assert rec.of("pass_begin")[-1]["pass"] == rec.of("pass_end")[-1]["pass"]


def test_recording_that_starts_at_a_breakpoint_knows_each_leafs_grad_before() -> None:
    stepper = AutoStepper("step", breakpoints=[{"kind": "node", "pattern": "Mul*"}],
                          stop_at_pass_start=False)
    rec = ListRecorder()
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.grad = torch.tensor([10.0, 10.0])
    with captured(Capture(rec, stepper.controller, record=False)):
        (w * w).sum().backward()
    (acc,) = rec.of("accumulate")
    assert acc["before"]["values"] == [10.0, 10.0] and acc["after"]["values"] == [12.0, 14.0]


def _first_stop(breakpoints: list[dict], build: Any) -> tuple[dict[str, Any], ListRecorder]:
    stepper = AutoStepper("continue", breakpoints=breakpoints, stop_at_pass_start=False)
    rec = ListRecorder()
    with captured(Capture(rec, stepper.controller, record=False)):
        build().backward()
    stops = [e for e in stepper.events if e["event"] == "stopped"]
    assert stops, "the breakpoint must stop the pass"
    return stops[0], rec


def test_gradient_breakpoints_skip_pass_through_nodes_but_keep_steps_exact() -> None:
    def build() -> torch.Tensor:
        x = torch.tensor([[0.0, 1.0, 4.0]], requires_grad=True)
        y = x.t().reshape(3).sqrt().unsqueeze(0).view(3, 1)  # NaN-free forward, inf gradient
        return (y.transpose(0, 1) * 2).sum()

    stop, rec = _first_stop([{"kind": "nonfinite"}], build)
    full = record(lambda: build().backward())
    order = [(e["step"], e["name"]) for e in full.of("node")]
    sqrt_step = next(step for step, name in order if name == "SqrtBackward0")
    assert (stop["name"], stop["after"]) == ("SqrtBackward0", True)
    assert stop["step"] == sqrt_step, "steps count the bare pass-through nodes too"
    ran = [(e["step"], e["name"]) for e in rec.of("node")]
    assert ran == [(step, name) for step, name in order if step <= sqrt_step]
    assert rec.of("pass_end")[0]["skipped"] == [], "every node ran, hooked or not"


def test_a_summed_gradient_entering_a_view_is_still_checked_there() -> None:
    def build() -> torch.Tensor:
        x = torch.ones(2, requires_grad=True)
        v = (x * 3).view(2)  # two consumers: the engine sums their gradients before the view
        return v.sum() + v.sum()

    stop, _ = _first_stop([{"kind": "norm", "above": 2.0}], build)
    assert (stop["name"], stop["reason"]) == ("ViewBackward0", "norm")
