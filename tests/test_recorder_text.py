"""The JSON text a recorded pass carries with its events (``encoded``) is exactly what encoding
the event dicts gives: summaries, saved-tensor lists, node and accumulate events."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from backstep.engine.capture import Capture
from backstep.engine.diagnostics import Diagnostician
from backstep.engine.graph import Graph
from backstep.engine.recorder import JsonlRecorder, ListRecorder, emit_all
from backstep.engine.rounding import stat_value
from backstep.engine.saved import saved_record, saved_status
from backstep.engine.summary import SummaryBatch
from backstep.events.form import compact_event, compact_saved, compact_summary, expand
from backstep.events.text import Encoded
from backstep.protocol import encode
from tests.scenarios import SCENARIOS

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _tensors() -> list[torch.Tensor]:
    torch.manual_seed(0)
    base = torch.randn(12, 10)
    out = [base, base.t(), base[:, :3], torch.randn(3), torch.tensor(2.5),
           torch.tensor([0.0, -0.0]), torch.tensor([-0.0, -0.0, 1e-45]), torch.zeros(30),
           -torch.zeros(30), torch.tensor([1.0, math.nan]), torch.tensor([math.inf, 2.0]),
           torch.full((3, 3), 3e38), torch.randn(200) * 1e-30, torch.randn(16) * 1e12,
           torch.tensor([123456789.0, 1e-7, 0.1, 1 / 3])]
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        out += [t.to(dtype) for t in out[:11]]
    return out


def test_summary_texts_are_their_json() -> None:
    batch = SummaryBatch()
    tensors = _tensors()
    slots = [batch.add(t) for t in tensors]
    results = batch.compute()
    with_text = 0
    for t, slot in zip(tensors, slots, strict=True):
        summary = results[slot]
        assert summary is not None
        text = getattr(summary, "text", None)
        if text is not None:
            with_text += 1
            assert text == _dumps(compact_summary(summary))  # as a trace file writes it
            assert summary["nonfinite"] == 0
            if t.dtype == torch.float32:
                assert summary["mean"] == stat_value(float(t.sum()) / t.numel(), t.dtype)
        else:  # non-finite, or a norm or sum that overflows its dtype: per tensor, no text
            assert summary["nonfinite"] or not (math.isfinite(float(t.norm()))
                                                and math.isfinite(float(t.sum())))
    assert with_text > 30
    # signed zeros read as they are
    zeros = results[slots[5]]
    assert zeros is not None and zeros["values"] == [0.0, -0.0]
    assert zeros.text is not None and '"values":[0.0,-0.0]' in zeros.text


def test_a_summary_with_a_histogram_is_a_plain_dict() -> None:
    from backstep.engine.summary import summarize

    out = summarize(torch.randn(100), hist=True)
    assert out is not None and "hist" in out and type(out) is dict


def _nodes(root: Any) -> list[Any]:
    return Graph([root]).nodes  # every node reachable from root, as the recorder walks them


def _check_saved(root: Any) -> int:
    texts = 0
    for node in _nodes(root):
        entries, text = saved_record(node)
        assert entries == saved_status(node)
        if text is not None:
            texts += 1
            assert text == _dumps(compact_saved(entries))
    return texts


def test_saved_records_are_the_saved_statuses() -> None:
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = torch.randn(2, 3, 8, requires_grad=True)
    out = layer(x).pow(2).mean()
    assert _check_saved(out.grad_fn) > 10
    # scalars that compare equal but read differently: -0.0 / 0.0, 1 / 1.0 / True
    a = torch.randn(4, requires_grad=True)
    mixed = (a.add(a, alpha=-0.0) + a.add(a, alpha=0.0) + a.add(a, alpha=1)
             + a.add(a, alpha=1.0) + torch.nn.functional.leaky_relu(a, -0.0)
             + torch.nn.functional.leaky_relu(a, 0.0)).sum()
    _check_saved(mixed.grad_fn)
    seen = {saved_record(n)[1] for n in _nodes(mixed.grad_fn)}
    assert any('"value":-0.0' in (t or "") for t in seen)
    # freed, modified in place, packed by checkpoint
    b = torch.randn(5, requires_grad=True)
    y = (b * b).exp()
    y.sum().backward()
    _check_saved(y.grad_fn)  # freed now
    c = torch.randn(5, requires_grad=True)
    d = c.clone()
    e = d.sigmoid()
    e.add_(1)
    _check_saved(e.grad_fn)
    f = checkpoint(lambda t: t.sin() * 2, torch.randn(3, requires_grad=True),
                   use_reentrant=False)
    _check_saved(f.grad_fn)


class _Both:
    """A sink that hands every event to a trace file and keeps the dicts."""

    def __init__(self) -> None:
        self.stream = io.BytesIO()
        self.file = JsonlRecorder(self.stream)
        self.kept = ListRecorder()

    def emit(self, event: dict[str, Any]) -> None:
        self.kept.emit(event)
        self.file.emit(event)

    def emit_many(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.kept.emit(event)
        emit_all(self.file, events)

    def flush(self) -> None:
        pass


def test_trace_lines_are_the_encoded_events() -> None:
    both = _Both()
    capture = Capture(Diagnostician(both))
    capture.install()
    try:
        for name, fn in SCENARIOS.items():
            if name == "deep_chain":
                continue  # 3,000 nodes of the same
            try:
                fn()
            except Exception:  # noqa: BLE001 - the error scenarios raise as PyTorch does
                pass
        x = torch.tensor([0.0, -0.0, 2.0], requires_grad=True)
        (x * x + x.abs()).sum().backward()
        # complex gradients are summarised carefully, without a text: their nodes have none
        w = torch.tensor([1 + 2j, -3j], requires_grad=True)
        ((w * w).abs() * x[:2]).sum().backward()
    finally:
        capture.uninstall()
    lines = both.stream.getvalue().splitlines(keepends=True)
    events = both.kept.events
    assert len(lines) == len(events)
    carried = encoded_here = 0
    for line, event in zip(lines, events, strict=True):
        assert line == encode(compact_event(event))  # the file form (events.form)
        assert expand(json.loads(line)) == json.loads(encode(event))  # read back whole
        carried += type(event) is Encoded and event.text is not None
        encoded_here += (event["event"] == "node" and type(event) is Encoded
                         and event.text is None and b'"complex64"' in line)
    assert carried > 100
    assert encoded_here >= 2  # the complex nodes' lines: encoded by the recorder from the dict


def _summaries_of(monkeypatch: Any, cap_bytes: int | None) -> list[Any]:
    from backstep.engine.capture import hooks

    if cap_bytes is not None:
        monkeypatch.setattr(hooks, "BATCH_BYTES", cap_bytes)
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.install()
    try:
        for name, fn in SCENARIOS.items():
            if name == "deep_chain":
                continue
            try:
                fn()
            except Exception:  # noqa: BLE001 - the error scenarios raise as PyTorch does
                pass
        x = torch.tensor([1.0, math.nan, 3e38, -0.0], requires_grad=True)
        (x * 2 + x.exp() + x[1:].sum()).sum().backward()
    finally:
        capture.uninstall()
    out = []
    for event in recorder.events:
        if event["event"] == "node":
            out.append((event["name"], event["grad_outputs"], event["grad_inputs"],
                        event["saved"]))
        elif event["event"] == "accumulate":
            out.append(("accumulate", event["before"], event["after"]))
    return out


def test_settling_held_tensors_early_changes_no_summary(monkeypatch: Any) -> None:
    """A batch over its byte cap reduces what it holds and lets it go; the summaries are the
    ones a batch that held everything writes (every node settles with a cap of one byte)."""
    held = _summaries_of(monkeypatch, None)
    settled = _summaries_of(monkeypatch, 1)
    assert settled == held
    assert any(s and s.get("nonfinite") for entry in held for group in entry[1:3]
               for s in (group if isinstance(group, list) else [group]) if s)


def test_gc_thresholds_are_raised_only_while_a_pass_records() -> None:
    import gc

    from backstep.engine.capture.passes import PASS_GC_THRESHOLD

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    capture = Capture(ListRecorder())
    capture.install()
    try:
        x = torch.randn(3, requires_grad=True)
        y = x.exp()
        y.register_hook(lambda g: seen.append(gc.get_threshold()))
        y.sum().backward()
        with pytest.raises(RuntimeError):
            y.sum().backward()  # freed graph: the pass ends in an error
    finally:
        capture.uninstall()
    assert seen and seen[0][0] == PASS_GC_THRESHOLD and seen[0][1:] == before[1:]
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * 3 * x**2


def test_saved_records_follow_each_steps_versions_without_a_record_per_version() -> None:
    """A training loop bumps its parameters every step, and provenance records the version each
    saved tensor had: the entries and text still equal the careful read's, and the cache keeps
    one record per node shape, not one per step (a custom Function's saved tensors too)."""
    from backstep.engine import saved
    from backstep.engine.provenance import Provenance

    saved._RECORDS.clear()
    x = torch.linspace(-1.0, 1.0, 7)
    w = torch.full((), 0.5, requires_grad=True)
    texts = set()
    with Provenance():
        for _ in range(5):
            loss = (_Cube.apply(w * x) * w).sum()
            for node in _nodes(loss.grad_fn):
                entries, text = saved_record(node)
                assert entries == saved_status(node)
                assert text == _dumps(compact_saved(entries))  # every node has its text
                texts.add(text)
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
    assert any('"version":{"saved":4,"now":4}' in t for t in texts)  # the last step's
    assert len(saved._RECORDS) <= 6  # the graph's node shapes, whatever the steps
