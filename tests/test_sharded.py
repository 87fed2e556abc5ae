"""DTensor gradients are read as this rank's shard, and never with a DTensor op.

A DTensor op may redistribute (a collective); a collective issued inside a hook on one rank
while the other rank is elsewhere hangs the job. So every summary, gradient check and tensor
view of a DTensor goes through ``to_local()``. ``Spy`` (a DTensor whose ops go through Python
dispatch) counts the DTensor ops backstep runs: none may be. One process, a gloo group of one;
the two-rank jobs are in ``test_ranks_sharded``.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not torch.distributed.is_available(), reason="needs gloo")

CALLS: list[str] = []


@pytest.fixture(scope="module")
def mesh() -> Iterator[Any]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def spy(mesh: Any, local: torch.Tensor, placement: Any, shape: tuple[int, ...]) -> Any:
    """A DTensor holding ``local`` as its shard of ``shape``, whose DTensor ops are counted."""
    from torch.distributed.tensor import DTensor

    class Spy(DTensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            CALLS.append(str(func))
            return super().__torch_dispatch__(func, types, args, kwargs)

    stride = torch.empty(shape).stride()
    t = DTensor.from_local(local, mesh, [placement], run_check=False, shape=torch.Size(shape),
                           stride=stride)
    t.__class__ = Spy
    CALLS.clear()
    return t


def test_placements_read_as_people_write_them() -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard

    from backstep.engine.sharded import placement_text

    assert [placement_text(p) for p in (Shard(1), Replicate(), Partial())] == [
        "Shard(1)", "Replicate()", "Partial(sum)"]


def test_a_dtensor_is_summarised_by_its_local_shard_and_labelled(mesh: Any) -> None:
    from torch.distributed.tensor import Shard

    from backstep.engine.summary import SummaryBatch, summarize

    local = torch.arange(8.0).reshape(2, 4) - 3
    t = spy(mesh, local, Shard(0), (4, 4))
    plain = summarize(local)
    out = summarize(t, hist=True)
    assert out is not None and plain is not None
    assert out["shard"] == {"placements": ["Shard(0)"], "global_shape": [4, 4]}
    assert out["shape"] == [2, 4]
    assert {k: out[k] for k in plain} == plain  # the shard's own statistics, none global
    batch = SummaryBatch()
    slots = [batch.add(t), batch.add(local), batch.add(t)]
    summaries = batch.compute()
    assert [summaries[s]["shape"] for s in slots] == [[2, 4]] * 3
    assert [("shard" in summaries[s]) for s in slots] == [True, False, True]
    assert CALLS == []  # no DTensor op, so no collective


def test_gradient_checks_reduce_the_local_shard(mesh: Any) -> None:
    from torch.distributed.tensor import Shard

    from backstep.engine import device_checks
    from backstep.engine.capture.hooks import gradient_trip

    local = torch.tensor([[1.0, float("nan")], [2.0, 3.0]])
    t = spy(mesh, local, Shard(1), (2, 4))
    bp = SimpleNamespace(nonfinite=True, norm_above=None)
    assert gradient_trip(bp, (None, t)) == ("nonfinite", "grad_inputs[1] has 1 NaN/Inf values")
    checks = device_checks.GradientChecks()
    checks.submit(bp, 0, (), (t,))
    trip = checks.poll(bp)
    assert trip is not None and trip.reason == "nonfinite"
    big = spy(mesh, torch.full((2, 2), 10.0), Shard(0), (4, 2))
    bp = SimpleNamespace(nonfinite=False, norm_above=5.0)
    assert gradient_trip(bp, (big,)) == ("norm", "grad_inputs[0] norm 20 > 5")
    assert CALLS == []


def test_the_tensor_view_pages_through_the_local_shard(mesh: Any) -> None:
    from torch.distributed.tensor import Shard

    from backstep.engine.capture.values import TensorValues

    t = spy(mesh, torch.arange(6.0).reshape(3, 2), Shard(0), (6, 2))
    values = TensorValues()
    values._live = {1: SimpleNamespace(held={7: ((t,), ())})}  # type: ignore[dict-item]
    out = values._tensor_values({"pass": 1, "node": 7, "slot": "grad_outputs", "index": 0,
                                 "offset": 2, "limit": 3})
    assert out["shape"] == [3, 2] and out["values"] == [2.0, 3.0, 4.0]
    assert out["shard"] == {"placements": ["Shard(0)"], "global_shape": [6, 2]}
    assert CALLS == []


def test_sharded_fields_pass_the_schema_and_bad_ones_are_named() -> None:
    from backstep.events.spec import check

    summary = {"shape": [2, 4], "dtype": "float32",
               "shard": {"placements": ["Shard(0)"], "global_shape": [4, 4]}}
    assert check({"event": "accumulate", "pass": 1, "leaf": "m.w", "before": None,
                  "after": summary, "sharded": True}) is None
    assert check({"event": "pass_begin", "pass": 1, "nodes": [
        {"id": 1, "name": "RegisterPostBackwardFunctionBackward", "next": [], "comm": "x"}]}) is None
    bad = {**summary, "shard": {"placements": [0], "global_shape": [4, 4]}}
    assert "shard.placements" in (check({"event": "accumulate", "pass": 1, "after": bad}) or "")
    assert "comm" in (check({"event": "pass_begin", "pass": 1, "nodes": [
        {"id": 1, "name": "N", "comm": 3}]}) or "")


def test_no_fsdp_means_no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that never imported FSDP pays one dict look-up a pass, nothing more."""
    from backstep.engine import sharded

    monkeypatch.delitem(sys.modules, sharded._FSDP_MODULE, raising=False)
    assert sharded.fsdp_leaves({0: torch.zeros(1)}, [], [], sys._getframe()) == {}
    assert sharded.comm_points([], []) == {}


def test_the_fsdp_and_dtensor_names_read_are_in_this_torch() -> None:
    import torch.distributed.fsdp._fully_shard._fsdp_param_group  # noqa: F401
    import torch.distributed.tensor._redistribute  # noqa: F401

    from backstep.engine.torch_api import OPTIONAL, missing_names

    names = [n for n in OPTIONAL if n.startswith(("torch.distributed.fsdp",
                                                  "torch.distributed.tensor"))]
    assert len(names) == 4 and missing_names(torch, names) == []


def sharded_loss() -> torch.Tensor:
    """An FSDP2 model's loss, the model held by nothing but the graph (no variable names it)."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(3)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    return model(torch.randn(3, 4)).pow(2).sum()


def test_fsdp_leaves_are_named_from_the_graph_when_no_variable_holds_the_model(mesh: Any) -> None:
    from backstep.engine.capture import Capture
    from backstep.engine.recorder import ListRecorder
    from tests.engine_fixtures import captured

    recorder = ListRecorder()
    loss = sharded_loss()
    with captured(Capture(recorder)):
        loss.backward()
    events = recorder.events
    begin = next(e for e in events if e["event"] == "pass_begin")
    leaves = [n["leaf"] for n in begin["nodes"] if n["name"] == "AccumulateGrad"]
    # FSDP's own names (under the root), the first layer's too: its group has no node here
    assert sorted(leaves) == sorted(f"{i}.{k}" for i in range(3) for k in ("weight", "bias"))
    after = [e["after"] for e in events if e["event"] == "accumulate"]
    assert len(after) == 6 and all(a["shard"]["placements"] == ["Shard(0)"] for a in after)


def test_a_root_only_fsdp_model_is_found_through_the_frames(mesh: Any) -> None:
    """One ``fully_shard`` on the root: no post-backward node in the graph (the input needs no
    gradient), so the model is found where the caller holds it, and named as it is there."""
    from torch.distributed.fsdp import fully_shard

    from backstep.engine.capture import Capture
    from backstep.engine.recorder import ListRecorder
    from tests.engine_fixtures import captured

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Tanh())
    fully_shard(net)
    recorder = ListRecorder()
    loss = net(torch.randn(3, 4)).sum()
    with captured(Capture(recorder)):
        loss.backward()
    begin = next(e for e in recorder.events if e["event"] == "pass_begin")
    assert "RegisterPostBackwardFunctionBackward" not in {n["name"] for n in begin["nodes"]}
    assert sorted(n["leaf"] for n in begin["nodes"] if n["name"] == "AccumulateGrad") == [
        "net.0.bias", "net.0.weight"]
    # (while the root stays unsharded after forward, the module holds FSDP's unsharded copy:
    # the names alone do not tell that FSDP was found; the sharded .grad does)
    after = {e["leaf"]: e["after"] for e in recorder.events if e["event"] == "accumulate"}
    assert after["net.0.weight"]["shard"] == {"placements": ["Shard(0)"], "global_shape": [2, 4]}
    assert after["net.0.bias"]["shape"] == [2] and "shard" in after["net.0.bias"]
