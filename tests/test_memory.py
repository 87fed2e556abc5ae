"""A pass's memory (engine/capture/memory.py): saved storages counted once each, leaves left
out, each attributed to the module that made it, released as the pass runs."""

from __future__ import annotations

import torch
import torch.nn as nn

from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import ListRecorder
from backstep.events.spec import check
from backstep.traces.memory import source_of

MiB = 1 << 20


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1024, 4096)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(4096, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def unique_saved_storages(root: object, leaves: set[int]) -> dict[int, int]:
    """An independent count: every node's ``_saved_*`` tensor unpacked (no checkpoint here),
    one entry per storage pointer, the graph's leaves' storages left out."""
    seen, stack, out = set(), [root], {}
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr)
                if isinstance(value, torch.Tensor):
                    storage = value.untyped_storage()
                    if storage.data_ptr() not in leaves:
                        out[storage.data_ptr()] = storage.nbytes()
        stack += [fn for fn, _ in node.next_functions]
    return out


def traced(step) -> list[dict]:
    recorder = ListRecorder()
    capture, provenance = Capture(recorder), Provenance()
    capture.annotate = annotate  # as engine/session.py wires them
    capture.install()
    provenance.install()
    try:
        step()
    finally:
        provenance.uninstall()
        capture.uninstall()
    return recorder.events


def test_mlp_holds_exactly_its_unique_saved_storages() -> None:
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(256, 1024), torch.randn(256, 1024)
    expected: dict[int, int] = {}

    def step() -> None:
        loss = nn.functional.mse_loss(model(x), y)
        leaves = {p.untyped_storage().data_ptr() for p in model.parameters()}
        expected.update(unique_saved_storages(loss.grad_fn, leaves))
        loss.backward()

    events = traced(step)
    memory = next(e for e in events if e["event"] == "memory")
    assert check(memory) is None
    assert memory["bytes"] == sum(expected.values()) == 7 * MiB
    assert sorted(s["bytes"] for s in memory["storages"]) == sorted(expected.values())
    # fc2's weight (its mat2, a view); fc1 saves no weight: x needs no gradient
    assert memory["leaves"] == model.fc2.weight.numel() * 4
    by_module: dict[object, int] = {}
    for s in memory["storages"]:
        by_module[s.get("module")] = by_module.get(s.get("module"), 0) + s["bytes"]
    top = max(by_module, key=by_module.__getitem__)
    assert top.endswith("act") and by_module[top] == 4 * MiB  # tanh's result, fc2's mat1 too
    tanh = next(s for s in memory["storages"] if s["bytes"] == 4 * MiB)
    assert tanh["op"] == "TanhBackward0" and len(tanh["held_by"]) == 2
    made_outside = [s for s in memory["storages"] if s.get("node") is None]
    assert sorted(s["bytes"] for s in made_outside) == [MiB, MiB]  # x and the target
    begin = next(e for e in events if e["event"] == "pass_begin")
    sources = {n["id"]: n["source"] for n in begin["nodes"]}
    assert all(source_of(s, sources)["file"] == __file__ for s in made_outside)
    assert all("module" not in s and "op" not in s for s in made_outside)
    # fc2's output, saved by the loss, is fc2's
    assert any(s.get("module", "").endswith("fc2") and s["op"] == "AddmmBackward0"
               for s in memory["storages"])

    end = next(e for e in events if e["event"] == "memory_end")
    assert check(end) is None
    assert all(step is not None for step in end["freed"])
    assert end["held"][-1][1] == 0
    held = [b for _, b in end["held"]]
    assert held == sorted(held, reverse=True) and held[0] < 7 * MiB
    steps = {e["id"]: e["step"] for e in events if e["event"] == "node"}
    for storage, freed in zip(memory["storages"], end["freed"], strict=True):
        assert freed == max(steps[i] for i in storage["held_by"])
    order = [e["event"] for e in events]
    assert order.index("memory") == order.index("pass_begin") + 1
    assert order.index("memory_end") == order.index("pass_end") - 1


def test_views_count_once_and_retain_graph_releases_nothing() -> None:
    x = torch.randn(64, 64, requires_grad=True)
    base = torch.randn(128, 64)

    def step() -> None:
        a = base[:64] * x  # the view saves base's storage
        b = base[64:] * x  # the other half: the same storage
        (a + b).sum().backward(retain_graph=True)

    events = traced(step)
    memory = next(e for e in events if e["event"] == "memory")
    assert memory["bytes"] == 128 * 64 * 4  # base once; x is a leaf
    end = next(e for e in events if e["event"] == "memory_end")
    assert end["freed"] == [None] and end["held"] == []


def test_a_pass_keeps_no_tensor_alive() -> None:
    import gc
    import weakref

    refs = []

    def step() -> None:
        t = torch.randn(32, 32, requires_grad=True)
        h = torch.tanh(t * 2)
        refs.append(weakref.ref(h))
        h.sum().backward()

    traced(step)
    gc.collect()
    assert refs[0]() is None


def test_cuda_figures_beside_them() -> None:
    import pytest

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.cuda.init()
    model = nn.Linear(64, 64).cuda()
    x = torch.randn(32, 64, device="cuda")

    def step() -> None:
        model(x).tanh().sum().backward()

    events = traced(step)
    memory = next(e for e in events if e["event"] == "memory")
    end = next(e for e in events if e["event"] == "memory_end")
    for figures in (memory["cuda"], end["cuda"]):
        assert figures["allocated"] > 0 and figures["peak"] >= figures["allocated"]
    assert check(memory) is None and check(end) is None


def test_cuda_figures_never_sync(monkeypatch) -> None:
    """On CPU the figures are null, and reading them calls nothing that could sync."""
    from backstep.engine.capture import memory as memory_module

    assert memory_module.cuda_figures() is None or torch.cuda.is_available()
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append(a))
    memory_module.cuda_figures()
    assert calls == []


def test_run_armed_reads_no_memory(monkeypatch) -> None:
    """A live session between stops records nothing: no saved storage is read."""
    from backstep.engine import capture as capture_module
    from backstep.engine.controller import Controller

    calls = []
    monkeypatch.setattr(capture_module, "memory_event", lambda *a: calls.append(a))
    controller = Controller(lambda event: None, [], stop_at_pass_start=False)
    capture = Capture(ListRecorder(), controller, record=False)
    capture.install()
    try:
        t = torch.randn(8, 8, requires_grad=True)
        (t * 2).tanh().sum().backward()
    finally:
        capture.uninstall()
    assert calls == [] and t.grad is not None
    recording = Capture(ListRecorder())  # the control: a recorded pass reads them
    recording.install()
    try:
        (t * 2).tanh().sum().backward()
    finally:
        recording.uninstall()
    assert len(calls) == 1
