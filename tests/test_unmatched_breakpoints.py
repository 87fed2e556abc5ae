"""Issue 44: a breakpoint that matches nothing was silent (``--break 'module:transformer.h.1.*'``
on nanoGPT, whose paths start ``model.transformer...``, never stopped and said nothing). After a
pass the UI says which specs matched none of its nodes, with the nearest real name."""

from __future__ import annotations

import torch

from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.recorder import ListRecorder
from backstep.events.spec import check
from backstep.events.unmatched import nearest, said, unmatched
from tests.engine_fixtures import captured

NODES = [("NativeLayerNormBackward0", "model.transformer.h.1.ln_1", None),
         ("AddmmBackward0", "model.transformer.h.1.attn.c_attn", None),
         ("AccumulateGrad", "model.transformer.h.1.attn.c_attn",
          "model.transformer.h.1.attn.c_attn.weight"),
         ("SqrtBackward0", None, None)]


def test_a_pattern_missing_its_prefix_is_offered_with_it() -> None:
    misses = unmatched([{"kind": "module", "pattern": "transformer.h.1.*"}], NODES)
    assert misses == [("module:transformer.h.1.*", "module:model.transformer.h.1.*")]
    assert said(1, misses) == ("breakpoint matched nothing in pass 1: module:transformer.h.1.* "
                               "(nearest: module:model.transformer.h.1.*)")


def test_node_and_leaf_names_get_their_nearest_and_matching_specs_say_nothing() -> None:
    specs = [{"kind": "node", "pattern": "SqrtBackward"},  # the 0 is missing
             {"kind": "leaf", "name": "transformer.h.1.attn.c_attn.weight"},
             {"kind": "node", "pattern": "Addmm*"},  # matches: nothing said
             {"kind": "module", "pattern": "model.transformer.h.1.ln_1"},  # exact: matches
             {"kind": "nonfinite"},  # decided from gradients: never checked here
             {"kind": "node", "pattern": "Zzzqqq*"}]  # nothing near
    assert unmatched(specs, NODES) == [
        ("node:SqrtBackward", "node:SqrtBackward*"),
        ("leaf:transformer.h.1.attn.c_attn.weight",
         "leaf:model.transformer.h.1.attn.c_attn.weight"),
        ("node:Zzzqqq*", None)]
    assert nearest("module", "x", []) is None


class GPT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = torch.nn.ModuleDict({"h": torch.nn.ModuleList(
            [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()) for _ in range(2)])})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.transformer["h"]:
            x = block(x)
        return x


def run(breakpoints: list[dict], passes: int = 2) -> list[dict]:
    from backstep.engine.provenance import Provenance, annotate

    recorder = ListRecorder()
    controller = Controller(recorder.emit, breakpoints, stop_at_pass_start=False)
    capture = Capture(recorder, controller, record=False)
    capture.annotate = annotate
    provenance = Provenance()
    provenance.install()
    try:
        with captured(capture):
            model = GPT()
            for _ in range(passes):
                model(torch.randn(2, 4)).sum().backward()
    finally:
        provenance.uninstall()
    return recorder.of("diagnosis")


def test_a_breakpoint_that_never_stops_is_said_after_the_first_pass() -> None:
    """The pass never stops and is never shown: the engine says it, once, as a diagnosis."""
    (diagnosis,) = run([{"kind": "module", "pattern": "transformer.h.1.*"}])  # two passes
    assert diagnosis["kind"] == "breakpoint_unmatched" and diagnosis["severity"] == "warning"
    assert diagnosis["pass"] == 1
    assert diagnosis["message"] == ("breakpoint matched nothing in pass 1: "
                                    "module:transformer.h.1.* (nearest: module:model.transformer"
                                    ".h.1.*)"), diagnosis["message"]
    assert check(diagnosis) is None


def test_two_misses_in_one_line_once_over_three_passes() -> None:
    (diagnosis,) = run([{"kind": "node", "pattern": "TanhBackward"},
                        {"kind": "module", "pattern": "nowhere.*"}], passes=3)
    assert diagnosis["message"].startswith("breakpoints matched nothing in pass 1: "
                                           "node:TanhBackward (nearest: node:TanhBackward*); "
                                           "module:nowhere.*"), diagnosis["message"]
