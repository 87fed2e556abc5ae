"""The gradient-flow chart's "model order" is the order of ``named_parameters()`` (registration),
not the graph walked back from the loss: the engine lists the leaves that way in pass_begin."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from backstep.tui.state.flow_leaves import leaf_flows
from backstep.tui.state.model import SessionModel
from tests.engine_fixtures import captured


def record(fn: Any) -> ListRecorder:
    recorder = ListRecorder()
    with captured(Capture(recorder)):
        fn()
    return recorder


def charted_names(recorder: ListRecorder) -> list[str]:
    model = SessionModel()
    for event in recorder.events:
        model.apply(event)
    return [flow.name for flow in leaf_flows(model.snapshot())]


class Stacked(nn.Module):
    """Two LSTMs then a linear layer, as the LBFGS time-sequence example builds them."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 5)
        self.lstm2 = nn.LSTMCell(5, 5)
        self.linear = nn.Linear(5, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = c1 = h2 = c2 = torch.zeros(x.size(0), 5)
        outs = []
        for step in x.split(1, dim=1):
            h1, c1 = self.lstm1(step, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outs.append(self.linear(h2))
        return torch.cat(outs, dim=1)


def test_an_lstm_charts_its_leaves_as_named_parameters_lists_them() -> None:
    torch.manual_seed(0)
    model = Stacked()
    x = torch.randn(2, 4)

    def run() -> None:
        model(x).pow(2).mean().backward()

    recorder = record(run)
    expected = [f"model.{name}" for name, _ in model.named_parameters()]
    (begin,) = recorder.of("pass_begin")
    leaf_of = {n["id"]: n["leaf"] for n in begin["nodes"] if n.get("leaf")}
    assert [leaf_of[i] for i in begin["leaves"]] == expected
    assert charted_names(recorder) == expected


def test_a_dcgan_block_puts_weight_before_bias() -> None:
    torch.manual_seed(0)
    netG = nn.Sequential(nn.ConvTranspose2d(4, 3, 4, 1, 0, bias=False), nn.BatchNorm2d(3),
                         nn.ReLU(True), nn.ConvTranspose2d(3, 1, 4, 2, 1, bias=True), nn.Tanh())
    noise = torch.randn(2, 4, 1, 1)

    def run() -> None:
        netG(noise).mean().backward()

    names = charted_names(record(run))
    assert names == ["netG.0.weight", "netG.1.weight", "netG.1.bias", "netG.3.weight",
                     "netG.3.bias"]


def test_unnamed_leaves_come_after_the_named_ones() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(3, 1)

    def run() -> None:
        (layer(torch.randn(2, 3, requires_grad=True)).sum()).backward()

    names = charted_names(record(run))
    assert names[:2] == ["layer.weight", "layer.bias"]
    assert len(names) == 3 and names[2].startswith("leaf#")

