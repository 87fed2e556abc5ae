"""Module paths name a module object the same wherever it is called from, and agree with the
leaf names; modules held in plain lists and dicts are named by position."""

from __future__ import annotations

import runpy
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch
from torch import nn

from backstep.engine.capture import Capture
from backstep.engine.naming import module_name, module_paths
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import ListRecorder
from backstep.events.breakpoints import parse_breakpoint
from tests.engine_fixtures import AutoStepper, captured

SCRIPT = textwrap.dedent(
    """
    import torch
    from torch import nn

    torch.manual_seed(0)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return torch.relu(self.fc(x))


    net = Net()
    x = torch.randn(3, 4)
    net(x).sum().backward()  # top level


    def train():
        net(x).sum().backward()  # inside a function


    train()
    optimizer = torch.optim.LBFGS(net.parameters(), max_iter=1)


    def closure():
        optimizer.zero_grad()
        loss = net(x).sum()
        loss.backward()  # inside an LBFGS closure
        return loss


    optimizer.step(closure)
    """
)


def run_script(path: Path, *patterns: str) -> tuple[ListRecorder, list[dict[str, Any]]]:
    """Run ``path`` as ``backstep run --break PATTERN`` would: provenance on, each breakpoint
    answered with continue. Returns the recorded events and the stops."""
    stepper = AutoStepper("continue", stop_at_pass_start=False,
                          breakpoints=[parse_breakpoint(p) for p in patterns])
    recorder = ListRecorder()
    capture = Capture(recorder, stepper.controller)
    capture.annotate = annotate
    with Provenance(), captured(capture):
        runpy.run_path(str(path), run_name="__main__")
    return recorder, [e for e in stepper.events if e["event"] == "stopped"]


def test_global_model_has_one_path_wherever_it_is_called(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    recorder, stops = run_script(script, "module:net.fc")
    begins = recorder.of("pass_begin")
    assert len(begins) == 3
    for begin in begins:
        modules = {n["module"] for n in begin["nodes"] if n["module"]}
        leaves = {n["leaf"] for n in begin["nodes"] if n["leaf"]}
        assert modules == {"net", "net.fc"}, begin["caller"]
        assert leaves == {"net.fc.weight", "net.fc.bias"}
    # the breakpoint stops in every pass, at the two nodes net.fc made (addmm, t)
    assert sorted(e["pass"] for e in stops) == [1, 1, 2, 2, 3, 3]


class Stack(nn.Module):
    """Layers in a plain list and a plain dict: no attribute path reaches them."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(4, 4) for _ in range(3)]
        self.heads = {"enc": nn.Linear(4, 2), "dec": nn.Linear(4, 2)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.heads["enc"](x).sum() + self.heads["dec"](x).sum()


def record(run: Any) -> list[dict[str, Any]]:
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.annotate = annotate
    with Provenance(), captured(capture):
        run()
    return recorder.of("pass_begin")


def paths_and_leaves(begin: dict[str, Any]) -> tuple[set[str], set[str]]:
    modules = {n["module"] for n in begin["nodes"] if n["module"]}
    return modules, {n["leaf"] for n in begin["nodes"] if n["leaf"]}


def test_modules_in_plain_containers_are_named_by_position() -> None:
    torch.manual_seed(0)
    stack = Stack()
    x = torch.randn(3, 4)
    (begin,) = record(lambda: stack(x).backward())
    modules, leaves = paths_and_leaves(begin)
    held = {"stack.layers[0]", "stack.layers[1]", "stack.layers[2]",
            "stack.heads['enc']", "stack.heads['dec']"}
    assert modules == {"stack", *held}
    assert leaves == {f"{m}.{p}" for m in held for p in ("weight", "bias")}


def through(layers: Any, h: torch.Tensor) -> torch.Tensor:
    """A loop in its own frame: only the loop variable ``layer`` holds a layer here."""
    for layer in layers():
        h = layer(h)
    return h


def test_layers_in_a_variable_list_are_named_by_position() -> None:
    torch.manual_seed(0)
    layers = [nn.Linear(4, 4) for _ in range(2)]
    x = torch.randn(3, 4)

    def run() -> None:
        h = x
        for layer in layers:  # the loop variable outlives the loop, holding layers[1]
            h = layer(h)
        h.sum().backward()

    def run_in_a_function() -> None:
        through(lambda: layers, x).sum().backward()

    for case in (run, run_in_a_function):
        (begin,) = record(case)
        modules, leaves = paths_and_leaves(begin)
        assert modules == {"layers[0]", "layers[1]"}, case
        assert leaves == {f"layers[{i}].{p}" for i in (0, 1) for p in ("weight", "bias")}, case


def test_module_paths_cover_registered_and_held_modules() -> None:
    stack = Stack()
    paths = {name: module for name, module in module_paths(stack)}
    assert list(paths)[:1] == [""]
    assert paths["layers[2]"] is stack.layers[2]
    assert paths["heads['dec']"] is stack.heads["dec"]
    outer = nn.Sequential(stack)
    assert {name for name, _ in module_paths(outer)} >= {"0", "0.layers[1]", "0.heads['enc']"}


def lookup(get: Any) -> str | None:
    """``module_name`` of ``get()`` from a frame whose own variables do not hold it."""
    return module_name(get(), sys._getframe())


def test_module_name_reaches_through_an_outer_frame() -> None:
    """A module held by a caller's variable (a global model called inside ``train()``) is
    named from that variable, as its parameters are."""
    model = nn.Sequential(nn.Linear(2, 2))
    assert lookup(lambda: model[0]) == "model.0"
    assert lookup(lambda: nn.Linear(1, 1)) is None


class Trainer:
    """A plain object that holds the model: ``self.model(x)`` and ``loss.backward()`` in its
    method."""

    def __init__(self) -> None:
        self.model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))

    def step(self, x: torch.Tensor) -> None:
        self.model(x).sum().backward()


def test_leaves_of_a_model_held_by_self_are_named_as_its_modules() -> None:
    torch.manual_seed(0)
    trainer, x = Trainer(), torch.randn(2, 4)
    (begin,) = record(lambda: trainer.step(x))
    modules, leaves = paths_and_leaves(begin)
    assert modules == {"model.0", "model.1", "model.2"}
    assert leaves == {f"model.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")}
