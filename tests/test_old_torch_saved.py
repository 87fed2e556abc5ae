"""On a torch without ``SavedTensor.data`` (2.4 to 2.9) saved tensors are listed by name with status
``unknown``: nothing is unpacked (unpacking re-runs a checkpoint's forward), no
saved_tensors_hooks are installed, gradients stay bit-identical, and the saved-tensors panel says
in one line what is missing. The torch running these tests has ``.data``; ``saved.SAVED_DATA``
set False stands in for one that lacks it (it is what feature detection sets on such a torch)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from backstep.engine import saved
from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.recorder import ListRecorder
from backstep.engine.torch_api import saved_tensor_data
from backstep.tui.panels.saved import UNKNOWN_LINE, SavedPanel
from tests.engine_fixtures import captured, nodes_of, record
from tests.pitfall_runs import PITFALLS, check_script, diagnose
from tests.tui_fixtures import RecordingLink, example_events, live_app, upto_stop
from tests.tui_pilot import pilot, settle


def fake_torch(saved_tensor: type | None) -> Any:
    autograd = SimpleNamespace() if saved_tensor is None else SimpleNamespace(
        SavedTensor=saved_tensor)
    return SimpleNamespace(_C=SimpleNamespace(_autograd=autograd))


def test_saved_tensor_data_is_found_by_feature_detection() -> None:
    class Old:  # torch 2.4-2.9: SavedTensor has register_hooks, nothing to read
        def register_hooks(self) -> None: ...

    class New(Old):
        data = None

    assert saved_tensor_data(fake_torch(New))
    assert not saved_tensor_data(fake_torch(Old))
    assert not saved_tensor_data(fake_torch(None))


@pytest.fixture
def old_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saved, "SAVED_DATA", False)
    monkeypatch.setattr(saved, "_RECORDS", {})  # entries read with .data must not be reused


def test_a_node_lists_its_saved_tensors_by_name_and_its_scalars(old_torch: None) -> None:
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    out = x.pow(3)
    node = out.grad_fn
    statuses = {s["name"]: s["status"] for s in saved.saved_status(node, check=True)}
    assert statuses == {"self": "unknown", "exponent": "scalar"}
    entries, text = saved.saved_record(node)
    assert [(s["name"], s["status"], s.get("shape"), s.get("bytes")) for s in entries] == [
        ("self", "unknown", None, 0), ("exponent", "scalar", None, None)]
    assert text is not None and '"unknown"' in text
    out.sum().backward()  # freed now: still unknown, never an error
    assert {s["status"] for s in saved.saved_status(node, check=True)} == {"unknown", "scalar"}


def test_a_checkpoint_is_never_unpacked_and_its_gradients_match(old_torch: None) -> None:
    """Unpacking a checkpointed node's saved tensor re-runs the checkpointed forward: counted."""
    calls = {"forward": 0}

    def block(t: torch.Tensor) -> torch.Tensor:
        calls["forward"] += 1
        return (t.sin() * t).exp()

    def run() -> torch.Tensor:
        torch.manual_seed(0)
        x = torch.randn(4, 3, requires_grad=True)
        y = checkpoint(block, x, use_reentrant=False)
        (y * y).sum().backward()
        return x.grad

    plain = run()
    assert calls["forward"] == 2  # the forward and the backward's one recompute
    calls["forward"] = 0
    grads: list[torch.Tensor] = []
    rec = record(lambda: grads.append(run()))
    assert calls["forward"] == 2, "backstep unpacked a saved tensor: the forward ran again"
    assert torch.equal(grads[0], plain)
    statuses = {s["status"] for n in nodes_of(rec) for s in n["saved"] or ()}
    assert "unknown" in statuses and statuses <= {"unknown", "scalar", "none"}


@pilot
async def test_the_panel_says_what_the_older_torch_lacks() -> None:
    events = copy.deepcopy(upto_stop(1, example_events()))
    events[-1]["saved"] = [
        {"name": "self", "status": "unknown", "shape": None, "dtype": None, "bytes": 0},
        {"name": "exponent", "status": "scalar", "value": 2.0}]
    app = live_app(RecordingLink(events))
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        text = str(app.query_one(SavedPanel).render())
        assert "unknown" in text
        assert " ".join(UNKNOWN_LINE.split()) in " ".join(text.split())


@pilot
async def test_the_panel_is_quiet_when_every_status_is_known() -> None:
    app = live_app(RecordingLink(upto_stop(1, example_events())))
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        assert "SavedTensor.data" not in str(app.query_one(SavedPanel).render())


def test_a_second_backward_is_diagnosed_and_names_the_freed_tensor(old_torch: None) -> None:
    """torch's own error says the node's saved tensors were freed: the diagnosis names them and
    the pass that freed them, as with SavedTensor.data."""
    check_script(PITFALLS / "backward_twice.py")
    (d,) = [e for e in diagnose(PITFALLS / "backward_twice.py") if e["event"] == "diagnosis"]
    assert "PowBackward0" in d["message"] and "`self`" in d["message"]
    assert "pass 1" in d["message"]


def test_a_second_backward_without_hooks_names_its_node(old_torch: None) -> None:
    controller = Controller(lambda e: None, stop_at_pass_start=False)  # nothing can stop
    rec = ListRecorder()
    with captured(Capture(rec, controller, record=False)):
        a = torch.tensor([1.0, 2.0], requires_grad=True)
        c = (a.exp() * 2).sum()
        c.backward()
        with pytest.raises(RuntimeError, match="second time"):
            c.backward()
    (failed,) = [e for e in rec.of("node") if e["error"]]
    assert failed["name"] == "MulBackward0"
    assert {s["status"] for s in failed["saved"]} == {"unknown"}


def test_a_backward_traced_under_make_fx_is_no_pass() -> None:
    """AOTAutograd traces torch.compile's backward under make_fx's proxy mode; before torch 2.13
    ``torch.compiler.is_compiling()`` is False there (seen on 2.4 to 2.12), and the trace showed
    as a pass of the user's. The same tracing, done by hand, must stay out of the passes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def grad_of(x: torch.Tensor) -> torch.Tensor:
        return torch.autograd.grad(x.sin().sum(), x)[0]

    traced: list[Any] = []
    rec = record(lambda: traced.append(make_fx(grad_of)(torch.randn(3, requires_grad=True))))
    assert "cos" in traced[0].code
    assert rec.of("pass_begin") == []
    x = torch.randn(3, requires_grad=True)
    assert record(lambda: grad_of(x)).of("pass_begin") != []  # a real one still is
