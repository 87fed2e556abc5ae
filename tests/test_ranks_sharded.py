"""FSDP2 and DTensor tensor parallelism on two gloo ranks under the real torchrun (CPU): under
``backstep trace`` the ranks print the same gradients, weights and collective counts as without
it, write one trace each, name every leaf by its parameter (also where the graph holds FSDP's
unsharded copy), show each ``.grad`` as this rank's shard, and label where FSDP and DTensor
communicate. ``backstep diff`` compares the two ranks' sharded traces. Each torchrun start costs
seconds: each test makes one and checks all it can on it."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from backstep.events.form import expand
from tests.torchrun_runs import ENV, EXIT_ABORT, TORCHRUN, free_port

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="needs gloo on loopback"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]

# Both scripts print, per rank and step, a digest of the local gradients, the number of gloo
# collectives the backward issued (torch's profiler sees each one), then a digest of the weights.
COMMON = """\
import hashlib
import os
import torch
import torch.distributed as dist

def digest(tensors):
    return hashlib.sha256(repr([t.flatten().tolist() for t in tensors]).encode()).hexdigest()[:12]

def backward(loss):
    if not os.environ.get("COUNT_COMMS"):  # the profiler's own lines would crowd the UI
        loss.backward()
        return -1
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss.backward()
    return sum(e.name.startswith("gloo:") for e in prof.events())

def report(step, grads, comms, opt):
    print(f"rank {rank} step {step} grads {digest(grads)} comms {comms}", flush=True)
    opt.step()
    opt.zero_grad()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
if os.environ.get("ATTACH"):  # as a user arms backstep in their own script
    import backstep
    backstep.attach(trace=os.environ["ATTACH"])
"""

END = """\
print(f"rank {rank} weights {digest([p.detach().to_local() for p in model.parameters()])}")
del model, opt
dist.destroy_process_group()
"""

FSDP = COMMON + textwrap.dedent(
    """\
    from torch.distributed.fsdp import fully_shard


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return x


    model = Net()
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        torch.manual_seed(1 + 10 * step + rank)  # each rank its own data: the reduction matters
        loss = model(torch.randn(3, 4)).pow(2).sum()
        comms = backward(loss)
        report(step, [p.grad.to_local() for p in model.parameters()], comms, opt)
    """
) + END

TP = COMMON + textwrap.dedent(
    """\
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module)

    mesh = init_device_mesh("cpu", (2,))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        torch.manual_seed(1 + 10 * step)  # tensor parallel: every rank sees the same batch
        x = torch.randn(3, 4, requires_grad=True)  # its gradient is all-reduced in backward
        comms = backward(model(x).pow(2).sum())
        report(step, [x.grad] + [p.grad.to_local() for p in model.parameters()], comms, opt)
    """
) + END

LINE = re.compile(r"rank \d (?:step \d grads [0-9a-f]{12} comms -?\d+|weights [0-9a-f]{12})")
COUNTING = {**ENV, "COUNT_COMMS": "1"}


def project(tmp_path: Path, script: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(script)
    return tmp_path


def plain_lines(cwd: Path, env: dict[str, str] = COUNTING) -> list[str]:
    """The job without backstep or torchrun: two pythons with torchrun's environment."""
    for _ in range(3):  # torch's own abort at exit (test_ranks_torchrun.EXIT_ABORT): again
        port = str(free_port())
        ranks = [subprocess.Popen(
            [sys.executable, "-u", "-m", "pkg.train"], cwd=cwd, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            env={**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r),
                 "LOCAL_RANK": str(r), "WORLD_SIZE": "2"}) for r in (0, 1)]
        codes, found, errors = [], [], ""
        for process in ranks:
            out, err = process.communicate(timeout=180)
            codes.append(process.returncode)
            found += LINE.findall(out)
            errors += err
        if codes == [0, 0] or set(codes) - {0, -signal.SIGABRT} or EXIT_ABORT not in errors:
            break
    assert codes == [0, 0], errors[-2000:]
    assert len(found) == 6
    return sorted(found)


def traced(cwd: Path) -> list[list[dict[str, Any]]]:
    """``backstep trace`` under torchrun, checked against the plain job; each rank's events."""
    plain = plain_lines(cwd)
    result = subprocess.run([*TORCHRUN, "-m", "backstep", "trace", "-o", "t.jsonl",
                             "-m", "pkg.train"], cwd=cwd, env=COUNTING, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # same gradients, weights and number of collectives: backstep issued none of its own
    assert sorted(LINE.findall(result.stdout)) == plain
    assert sorted(p.name for p in cwd.glob("*.jsonl")) == ["t.rank0.jsonl", "t.rank1.jsonl"]
    ranks = []
    for rank in (0, 1):
        events = [expand(json.loads(line))
                  for line in (cwd / f"t.rank{rank}.jsonl").read_text().splitlines()]
        assert events[0]["rank"] == rank and events[-1] == {"event": "exit", "code": 0,
                                                             "traceback": None, "passes": 2}
        assert [e["event"] for e in events].count("pass_end") == 2
        ranks.append(events)
    return ranks


def first(events: list[dict[str, Any]], kind: str, number: int = 1) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind and e.get("pass") == number]


def test_fsdp2_leaves_are_named_grads_are_shards_and_reduce_scatters_labelled(
        tmp_path: Path) -> None:
    cwd = project(tmp_path, FSDP)
    for rank, events in enumerate(traced(cwd)):
        nodes = first(events, "pass_begin")[0]["nodes"]
        params = [f"model.layers.{i}.{kind}" for i in (2, 1, 0) for kind in ("weight", "bias")]
        assert sorted(n["leaf"] for n in nodes if n["name"] == "AccumulateGrad") == sorted(params)
        comms = {n["module"]: n.get("comm") for n in nodes
                 if n["name"] == "RegisterPostBackwardFunctionBackward"}
        assert comms == {f"model.layers.{i}": f"FSDP post-backward of layers.{i}: "
                         "reduce-scatter of its gradients into the shards" for i in (1, 2)}
        # each .grad once a pass, as the shard the reduce-scatter left on this rank
        for number in (1, 2):
            accumulated = {e["leaf"]: e for e in first(events, "accumulate", number)}
            assert sorted(accumulated) == sorted(params)
            for name, event in accumulated.items():
                after = event["after"]
                assert event["sharded"] is True and event["before"] is None  # zero_grad: None
                shape = [4, 4] if name.endswith("weight") else [4]
                assert after["shard"] == {"placements": ["Shard(0)"], "global_shape": shape}
                assert after["shape"] == [2, *shape[1:]]
        # the unsharded gradients flow through the nodes as plain tensors, whole
        node = next(e for e in first(events, "node") if e["name"] == "AccumulateGrad"
                    and e["grad_outputs"][0]["shape"] == [4, 4])
        assert "shard" not in node["grad_outputs"][0]
        assert "leaf#" not in (cwd / f"t.rank{rank}.jsonl").read_text()
    # the ranks' data differ: their traces part at the first gradient that depends on it
    diff = subprocess.run([sys.executable, "-m", "backstep", "diff", "t.rank0.jsonl",
                           "t.rank1.jsonl"], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "difference born at pass 1, step 2" in diff.stdout and "PowBackward0" in diff.stdout


def test_tensor_parallel_gradients_are_summarised_as_local_shards(tmp_path: Path) -> None:
    cwd = project(tmp_path, TP)
    ranks = traced(cwd)
    for events in ranks:
        nodes = first(events, "pass_begin")[0]["nodes"]
        assert sorted(n["leaf"] for n in nodes if n["name"] == "AccumulateGrad") == [
            "model.0.bias", "model.0.weight", "model.2.bias", "model.2.weight", "x"]
        redistribute = [n["comm"] for n in nodes if n["name"] == "RedistributeBackward"]
        assert len(redistribute) == 2 and all(
            c.startswith("DTensor redistribute of the gradient to ") for c in redistribute)
        shards = {e["leaf"]: e["after"]["shard"] for e in first(events, "accumulate")
                  if "shard" in e["after"]}
        assert shards == {
            "model.0.weight": {"placements": ["Shard(0)"], "global_shape": [8, 4]},
            "model.0.bias": {"placements": ["Shard(0)"], "global_shape": [8]},
            "model.2.weight": {"placements": ["Shard(1)"], "global_shape": [4, 8]},
            "model.2.bias": {"placements": ["Replicate()"], "global_shape": [4]},
        }
        summaries = [s for e in first(events, "node") for s in e["grad_outputs"] if s]
        assert all(s.get("note") is None for s in summaries)  # every one read, none failed
        local = [s for s in summaries if "shard" in s]
        assert local and all(s["min"] is not None for s in local)
    # same data on both ranks: the replicated gradients agree, the shards differ
    diff = subprocess.run([sys.executable, "-m", "backstep", "diff", "t.rank0.jsonl",
                           "t.rank1.jsonl"], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert diff.returncode == 1, diff.stdout + diff.stderr


def test_run_steps_an_fsdp2_rank_while_the_other_records(tmp_path: Path) -> None:
    """``run --rank 0``: rank 0 stops in the UI, leaves named, the post-backward marked; rank 1
    records meanwhile. No collective of backstep's own: the ranks would hang on it."""
    from tests.pty_session import Pty, alive
    from tests.torchrun_runs import descendants

    cwd = project(tmp_path, FSDP)
    plain = plain_lines(cwd, ENV)
    ui = Pty([*TORCHRUN[1:], "-m", "backstep", "run", "--rank", "0", "--trace-others",
              "o.jsonl", "pkg/train.py"], cwd)
    try:
        screen = ui.expect(r"start of pass before SumBackward0", 180)
        assert "layers.2.bias" in screen and screen.count("FunctionBackward ⇄") == 2
        processes = descendants(ui.pid)
        ui.press("c")
        ui.expect(r"pass 2 .*start of pass", 60)
        ui.press("c")
        ui.expect(r"script exited with code 0", 60)
        for line in plain:
            if line.startswith("rank 0"):
                ui.expect(re.escape(line), 30)  # rank 0's output, in the UI's console
        raw = ui.raw.decode(errors="replace")
        assert [line for line in plain if line.startswith("rank 1") and line not in raw] == []
        ui.press("q")
        assert ui.wait(60) == 0
        assert [pid for pid in processes if alive(pid)] == [], "orphans left behind"
        events = [expand(json.loads(line))
                  for line in (cwd / "o.rank1.jsonl").read_text().splitlines()]
        accumulated = [e for e in events if e["event"] == "accumulate"]
        assert len(accumulated) == 12 and all(e["after"]["shard"] for e in accumulated)
    finally:
        ui.kill()


def test_attach_records_each_fsdp2_rank_as_trace_does(tmp_path: Path) -> None:
    cwd = project(tmp_path, FSDP)
    plain = plain_lines(cwd)
    result = subprocess.run([*TORCHRUN, "-m", "pkg.train"], cwd=cwd, capture_output=True,
                            env={**COUNTING, "ATTACH": "a.jsonl"}, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(LINE.findall(result.stdout)) == plain
    for rank in (0, 1):
        events = [expand(json.loads(line))
                  for line in (cwd / f"a.rank{rank}.jsonl").read_text().splitlines()]
        accumulated = [e for e in events if e["event"] == "accumulate"]
        assert sorted({e["leaf"] for e in accumulated}) == sorted(
            f"model.layers.{i}.{kind}" for i in range(3) for kind in ("weight", "bias"))
        assert len(accumulated) == 12
        assert all(e["after"]["shard"]["placements"] == ["Shard(0)"] for e in accumulated)
