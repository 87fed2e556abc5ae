"""``graph_kept_alive`` (diagnostics/kept_alive.py, capture/memory.KeptGraphs): fires when
earlier passes' graphs pile up, silent on graphs kept on purpose, and keeps nothing alive."""

from __future__ import annotations

import gc
import textwrap
import weakref
from pathlib import Path

import pytest
import torch

from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from tests.pitfall_runs import diagnose

HEAD = """
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
x, y = torch.randn(32, 8), torch.randn(32, 1)
"""

LOOPS = {
    "append": ("losses = []\nfor _ in range(10):\n"
               "    loss = nn.functional.mse_loss(model(x), y)\n"
               "    loss.backward()\n    losses.append(loss)\n", True),
    "retain_graph": ("h = model(x)\nfor _ in range(10):\n"
                     "    (h ** 2).mean().backward(retain_graph=True)\n", False),
    "truncated_bptt": ("cell = nn.RNNCell(8, 8)\nh = torch.zeros(4, 8)\nkept = []\n"
                       "for _ in range(10):\n    h = h.detach()\n"
                       "    for _ in range(3):\n        h = cell(torch.randn(4, 8), h)\n"
                       "    h.sum().backward()\n    kept.append(h.detach())\n", False),
    "double_backward": ("for _ in range(10):\n    xs = x.clone().requires_grad_()\n"
                        "    out = model(xs).sum()\n"
                        "    (g,) = torch.autograd.grad(out, xs, create_graph=True)\n"
                        "    (g.norm() + out).backward()\n", False),
    "last_output_kept": ("last = None\nfor _ in range(10):\n    out = model(x)\n"
                         "    nn.functional.mse_loss(out, y).backward()\n    last = out\n", False),
}


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_fires_on_a_growing_pile_only(name: str, tmp_path: Path) -> None:
    body, fires = LOOPS[name]
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(HEAD) + body)
    found = [e for e in diagnose(script)
             if e["event"] == "diagnosis" and e["kind"] == "graph_kept_alive"]
    assert len(found) == (1 if fires else 0), found
    if fires:
        assert "`losses` (a list)" in found[0]["message"]


def test_markers_keep_no_graph_alive() -> None:
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.install()
    try:
        refs = []
        for _ in range(3):
            t = torch.randn(4, 4, requires_grad=True)
            loss = (t * 2).tanh().sum()
            refs.append(weakref.ref(loss))
            loss.backward()
        del loss, t
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        assert not capture.kept._alive  # the markers went with their graphs
    finally:
        capture.uninstall()
