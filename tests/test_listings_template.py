"""The reused listing (``capture.listings``) fills a ``%`` template: text that holds ``%``,
braces or ``%s`` of its own (a source line, a module path) must come out as written, and the
node dicts built beside the text must be the ones the full path builds."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch import nn

from backstep.engine import graph as graph_module
from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import captured
from tests.listing_traces import listing_trace


class Odd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {"%s": x * 2, "{0[1]}": x}["%s"] % 5  # %s %d {0} %%: written as they are


def _odd_steps() -> None:
    torch.manual_seed(0)
    holder = {"a%sb{0}": Odd()}  # a module path with % and braces
    w = torch.randn(3, requires_grad=True)
    for _ in range(4):
        holder["a%sb{0}"](w * 3).sum().backward()


def test_percent_and_braces_in_the_listing_come_out_as_written() -> None:
    full, none_reused = listing_trace(False, _odd_steps)
    reused, count = listing_trace(True, _odd_steps)
    assert none_reused == 0 and count == 3
    assert reused == full
    assert b"] % 5  # %s %d {0} %%" in full and b"{0[1]}" in full
    assert b'"module":"holder[\'a%sb{0}\']"' in full


def _dicts(reuse: bool, monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """The node dicts of every ``pass_begin`` (ids numbered from 1, as in a fresh process)."""
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.listings.enabled = reuse
    capture.annotate = annotate
    with monkeypatch.context() as patch:
        patch.setattr(graph_module, "_ids", itertools.count(1))
        with captured(capture), Provenance():
            _odd_steps()
    assert capture.listings.reused == (3 if reuse else 0)
    return [e["nodes"] for e in recorder.of("pass_begin")]


def test_reused_node_dicts_are_the_full_path_s(monkeypatch: pytest.MonkeyPatch) -> None:
    full, reused = _dicts(False, monkeypatch), _dicts(True, monkeypatch)
    assert reused == full
    for nodes in reused:
        assert [list(n) for n in nodes] == [list(n) for n in full[0]]  # keys in order
        nexts = [n["next"] for n in nodes]
        assert len({id(x) for x in nexts}) == len(nexts)  # each node its own list
