"""Forward provenance: exact user lines and module paths on every node, and no change in results."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import Function
from torch.utils.checkpoint import checkpoint

from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.provenance import (
    MODULE_KEY,
    SOURCE_KEY,
    Provenance,
    annotate,
    inplace_history,
    module_of,
    saved_versions_of,
    source_of,
)
from backstep.engine.provenance import cuts as provenance_cuts
from backstep.engine.provenance import inplace as provenance_inplace
from tests.engine_models import Square
from tests.torch_features import needs_saved_data

FIXTURES = Path(__file__).parent / "fixtures"
HERE = str(Path(__file__).resolve())


@pytest.fixture(autouse=True)
def _forget_cuts() -> Iterator[None]:
    """Cuts are process-wide: a module run under no_grad here must not explain a later test's
    parameter (``encoder.weight`` in a pitfall script)."""
    yield
    provenance_cuts.clear()


def marker_line(path: Path, marker: str) -> int:
    """The line number carrying ``# @marker`` in ``path``."""
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# @{marker}"):
            return number
    raise AssertionError(f"no marker {marker} in {path}")


def this_line(marker: str) -> int:
    return marker_line(Path(HERE), marker)


def nodes(*roots: Any) -> Iterator[Any]:
    """Every node reachable from ``roots`` (after handing tags down with annotate)."""
    annotate(roots)
    seen: set[Any] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(parent for parent, _ in node.next_functions if parent is not None)


def where(node: Any) -> tuple[str, int, str | None] | None:
    source = source_of(node)
    if source is None:
        return None
    return Path(source["file"]).name, source["line"], module_of(node)


def non_leaf(all_nodes: Iterator[Any]) -> list[Any]:
    return [n for n in all_nodes if type(n).__name__ != "AccumulateGrad"]


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


# -- the multi-file fixture project ----------------------------------------------------------


@pytest.fixture
def provproj(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(FIXTURES))
    import provproj.train as train

    return train


def test_fixture_project_lines_and_modules(provproj: Any) -> None:
    layers = FIXTURES / "provproj" / "layers.py"
    ops = FIXTURES / "provproj" / "ops.py"
    train = FIXTURES / "provproj" / "train.py"
    model, x = provproj.build()
    with Provenance():
        loss = provproj.step(model, x)
    found: dict[tuple[str, int, str | None], set[str]] = {}
    graph = non_leaf(nodes(loss.grad_fn))
    for node in graph:
        spot = where(node)
        assert spot is not None, f"{type(node).__name__} has no source"
        found.setdefault(spot, set()).add(type(node).__name__)
    assert source_of(graph[0])["file"] == str(train.resolve())
    expected = {
        ("train.py", marker_line(train, "loss"), None): {"PowBackward0", "MeanBackward0"},
        ("train.py", marker_line(train, "head"), "model.head"): {"AddmmBackward0", "TBackward0"},
        ("layers.py", marker_line(layers, "norm"), "model.encoder.norm"): {
            "NativeLayerNormBackward0"
        },
    }
    for index in (0, 1):
        prefix = f"model.encoder.layers.{index}"
        expected[("layers.py", marker_line(layers, "fc1"), f"{prefix}.fc1")] = {
            "AddmmBackward0",
            "TBackward0",
        }
        expected[("layers.py", marker_line(layers, "tanh"), prefix)] = {"TanhBackward0"}
        expected[("layers.py", marker_line(layers, "fc2"), f"{prefix}.fc2")] = {
            "AddmmBackward0",
            "TBackward0",
        }
        expected[("ops.py", marker_line(ops, "residual"), prefix)] = {
            "MulBackward0",
            "AddBackward0",
        }
    assert found == expected


def test_source_code_text_and_leaves(provproj: Any) -> None:
    model, x = provproj.build()
    with Provenance():
        loss = provproj.step(model, x)
    source = source_of(loss.grad_fn)
    assert source["code"] == "return out.pow(2).mean()  # @loss"
    leaves = [n for n in nodes(loss.grad_fn) if type(n).__name__ == "AccumulateGrad"]
    assert len(leaves) == len(list(model.parameters()))
    assert all(source_of(n) is None and module_of(n) is None for n in leaves)


def test_fidelity_fixture_gradients_bit_identical(provproj: Any) -> None:
    model, x = provproj.build()
    provproj.step(model, x).backward()
    plain = grads(model)
    model.zero_grad()
    with Provenance():
        provproj.step(model, x).backward()
    traced = grads(model)
    assert plain.keys() == traced.keys()
    assert all(torch.equal(plain[k], traced[k]) for k in plain)


# -- torch's own modules -----------------------------------------------------------------------


def make_encoder() -> tuple[nn.TransformerEncoder, torch.Tensor]:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return encoder, torch.randn(2, 5, 16)


def test_transformer_encoder_lines_and_modules() -> None:
    encoder, x = make_encoder()
    with Provenance():
        out = encoder(x)  # @encoder-call
        loss = out.sum()  # @encoder-loss
    graph = non_leaf(nodes(loss.grad_fn))
    lines = {source_of(n)["line"] for n in graph}
    assert lines == {this_line("encoder-call"), this_line("encoder-loss")}
    attention = [n for n in graph if "ScaledDotProduct" in type(n).__name__]
    assert sorted(module_of(n) for n in attention) == [
        "encoder.layers.0.self_attn",
        "encoder.layers.1.self_attn",
    ]
    modules = {module_of(n) for n in graph}
    assert {"encoder.layers.0.linear1", "encoder.layers.1.norm2", None} <= modules
    assert all(m is None or m.startswith("encoder.layers.") for m in modules)
    # the nodes made inside F.multi_head_attention_forward all land on the attention module
    attn0 = [n for n in graph if module_of(n) == "encoder.layers.0.self_attn"]
    assert len(attn0) > 10


def test_transformer_encoder_gradients_bit_identical() -> None:
    encoder, x = make_encoder()
    encoder(x).pow(2).mean().backward()
    plain = grads(encoder)
    encoder.zero_grad()
    with Provenance():
        encoder(x).pow(2).mean().backward()
    traced = grads(encoder)
    assert all(torch.equal(plain[k], traced[k]) for k in plain)


def test_no_grad_eval_fast_path_unchanged() -> None:
    """nn.TransformerEncoder's eval fast path refuses torch-function modes: it must still run."""
    encoder, x = make_encoder()
    encoder.eval()
    with torch.no_grad():
        plain = encoder(x)
    with Provenance(), torch.no_grad():
        traced = encoder(x)
    assert torch.equal(plain, traced)


def test_frozen_eval_fast_path_unchanged() -> None:
    """Same fast path with grad enabled, when nothing requires grad (a frozen encoder)."""
    encoder, x = make_encoder()
    encoder.eval().requires_grad_(False)
    plain = encoder(x)
    with Provenance():
        traced = encoder(x)
    assert torch.equal(plain, traced)


# -- inside torch's own modules the mode is paused: scopes ------------------------------------


def mode_stack() -> list[Any]:
    """This thread's torch-function modes, innermost last."""
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def test_encoder_layers_get_the_call_line_and_inner_module_paths() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    x = torch.randn(2, 5, 16)
    with Provenance():
        before = mode_stack()
        out = model(x)  # @deep-call
        assert mode_stack() == before
        loss = out.mean()  # @deep-loss
    # read before annotate: the output of the outermost library module resolves on its own
    assert module_of(out.grad_fn) == "model.layers.3.norm2"
    assert source_of(out.grad_fn)["line"] == this_line("deep-call")
    graph = non_leaf(nodes(loss.grad_fn))
    me = Path(HERE).name
    spots: dict[str, set[tuple[str, int, str | None] | None]] = {}
    for node in graph:
        spots.setdefault(type(node).__name__, set()).add(where(node))
    assert spots.pop("MeanBackward0") == {(me, this_line("deep-loss"), None)}
    assert {spot[:2] for found in spots.values() for spot in found} == {
        (me, this_line("deep-call"))
    }
    layers = range(4)
    modules = {spot[2] for found in spots.values() for spot in found}
    assert modules == {
        f"model.layers.{i}{suffix}"
        for i in layers
        for suffix in ("", ".self_attn", ".linear1", ".linear2", ".norm1", ".norm2")
    }
    call = this_line("deep-call")
    assert spots["AddmmBackward0"] == {
        (me, call, f"model.layers.{i}.{name}")
        for i in layers
        for name in ("self_attn", "linear1", "linear2")
    }
    attention = [n for n in spots if "ScaledDotProduct" in n]
    assert len(attention) == 1
    assert spots[attention[0]] == {(me, call, f"model.layers.{i}.self_attn") for i in layers}
    assert spots["ReluBackward0"] == {(me, call, f"model.layers.{i}") for i in layers}
    assert spots["NativeLayerNormBackward0"] == {
        (me, call, f"model.layers.{i}.norm{k}") for i in layers for k in (1, 2)
    }
    inner = [n for n in graph if module_of(n) == "model.layers.3.self_attn"]
    assert len(inner) > 20  # the nodes made inside F.multi_head_attention_forward


class Gate(nn.Module):
    """A user block inside nn.Sequential: its ops keep their own lines."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)  # @gate-proj
        return x * torch.sigmoid(h)  # @gate-mul


def make_gated() -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), Gate(), nn.Tanh(), nn.Linear(8, 2)), torch.randn(3, 8)


def test_user_module_inside_sequential_keeps_its_own_lines() -> None:
    net, x = make_gated()
    with Provenance():
        out = net(x)  # @seq-call
    me = Path(HERE).name
    spots: dict[str, set[tuple[str, int, str | None] | None]] = {}
    for node in non_leaf(nodes(out.grad_fn)):
        spots.setdefault(type(node).__name__, set()).add(where(node))
    call = this_line("seq-call")
    assert spots == {
        "AddmmBackward0": {
            (me, call, "net.0"), (me, this_line("gate-proj"), "net.1.proj"), (me, call, "net.3")
        },
        "TBackward0": {
            (me, call, "net.0"), (me, this_line("gate-proj"), "net.1.proj"), (me, call, "net.3")
        },
        "SigmoidBackward0": {(me, this_line("gate-mul"), "net.1")},
        "MulBackward0": {(me, this_line("gate-mul"), "net.1")},
        "TanhBackward0": {(me, call, "net.2")},
    }


def test_user_module_inside_sequential_gradients_bit_identical() -> None:
    net, x = make_gated()
    x.requires_grad_()
    net(x).pow(2).sum().backward()
    plain, plain_x = grads(net), x.grad.clone()
    net.zero_grad()
    x.grad = None
    with Provenance():
        net(x).pow(2).sum().backward()
    assert all(torch.equal(plain[k], v) for k, v in grads(net).items())
    assert torch.equal(plain_x, x.grad)


@needs_saved_data  # the test reads .data
def test_inplace_module_inside_library_module_names_the_user_line() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 6, requires_grad=True)
    relu = nn.ReLU(inplace=True)
    body = nn.Sequential(nn.Linear(6, 6), nn.Sigmoid(), nn.ReLU(inplace=True))
    with Provenance():
        a = x * 2
        b = a.sin()  # saves a
        relu(a)  # @relu-call
        y = body(x)  # @body-call
    saved_input = b.grad_fn._raw_saved_self.data
    assert [(h["op"], h["line"]) for h in inplace_history(saved_input)] == [
        ("ReLU", this_line("relu-call"))
    ]
    sigmoid = y.grad_fn.next_functions[0][0]
    assert type(sigmoid).__name__ == "SigmoidBackward0"
    saved_result = sigmoid._raw_saved_result.data
    assert [(h["op"], h["line"]) for h in inplace_history(saved_result)] == [
        ("ReLU", this_line("body-call"))
    ]
    assert source_of(a.grad_fn)["line"] == this_line("relu-call")  # ReLU's own in-place node
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_mode_stack_unchanged_after_an_error_inside_a_library_module() -> None:
    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(4, 4))
    provenance = Provenance()
    with provenance:
        before = mode_stack()
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be"):
            net(torch.randn(2, 3, requires_grad=True))
        assert mode_stack() == before
        assert provenance._tracker is not None and provenance._tracker.entries() == []
        y = torch.randn(2, requires_grad=True) * 2  # @after-error
    assert source_of(y.grad_fn)["line"] == this_line("after-error")
    assert module_of(y.grad_fn) is None


class Interrupt(nn.Module):
    """Raises KeyboardInterrupt (a BaseException: always-called module hooks would not run)
    while armed."""

    armed = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.armed:
            raise KeyboardInterrupt
        return x * 3  # @interrupt-mul


def test_forward_ended_by_keyboard_interrupt_is_forgotten() -> None:
    torch.manual_seed(0)
    stop = Interrupt()
    net = nn.Sequential(nn.Linear(4, 4), stop, nn.Tanh())
    x = torch.randn(2, 4)
    provenance = Provenance()
    with provenance:
        before = mode_stack()
        with pytest.raises(KeyboardInterrupt):
            net(x)  # @interrupted
        stop.armed = False
        out = net(x)  # @after-interrupt
        assert mode_stack() == before
        assert provenance._tracker is not None and provenance._tracker.entries() == []
        again = net(x)  # @third
        z = again * 2  # @after-heal
    lines = {source_of(n)["line"] for n in non_leaf(nodes(out.grad_fn)) if source_of(n)}
    assert this_line("interrupted") not in lines  # no tag rather than a wrong one
    assert this_line("after-interrupt") in lines
    spots = {where(n) for n in non_leaf(nodes(z.grad_fn))}
    me = Path(HERE).name
    assert spots == {
        (me, this_line("after-heal"), None),
        (me, this_line("third"), "net.0"),
        (me, this_line("interrupt-mul"), "net.1"),
        (me, this_line("third"), "net.2"),
    }


def test_interrupt_inside_a_library_module_gives_the_mode_back_at_once() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    x = torch.randn(2, 4)

    def interrupt(module: nn.Module, args: Any, output: Any) -> None:
        raise KeyboardInterrupt

    handle = net[0].register_forward_hook(interrupt)
    provenance = Provenance()
    with provenance:
        before = mode_stack()
        with pytest.raises(KeyboardInterrupt):
            net(x)  # @interrupted-inside
        handle.remove()
        assert mode_stack() == before  # the region's pause ended with the interrupted call
        assert provenance._tracker is not None and provenance._tracker.entries() == []
        out = net(x)  # @next-call
        z = net(x) * 2  # @healed
    lines = {source_of(n)["line"] for n in non_leaf(nodes(out.grad_fn)) if source_of(n)}
    assert lines == {this_line("next-call")}
    assert {source_of(n)["line"] for n in non_leaf(nodes(z.grad_fn))} == {this_line("healed")}


class Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2  # @double-mul


def test_entry_left_by_an_interrupt_inside_the_tracker_is_dropped_at_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A KeyboardInterrupt landing inside the tracker's own ``enter`` (after it pushed the entry,
    before the call's ``leave`` can run) leaves a stale entry: the next call must not nest
    under it."""
    torch.manual_seed(0)
    double = Double()
    net = nn.Sequential(nn.Linear(4, 4), Double())
    x = torch.randn(2, 4)
    real_note = provenance_cuts.note
    fired: list[bool] = []

    def note(*args: Any, **kwargs: Any) -> None:
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt
        real_note(*args, **kwargs)

    monkeypatch.setattr(provenance_cuts, "note", note)
    provenance = Provenance()
    with provenance:
        before = mode_stack()
        with torch.no_grad(), pytest.raises(KeyboardInterrupt):
            double(x)  # noted as a no_grad forward: interrupted inside ``enter``
        assert fired and provenance._tracker is not None
        assert len(provenance._tracker.entries()) == 1  # stale
        out = net(x)  # @after-stale
        assert mode_stack() == before
        assert provenance._tracker.entries() == []
    me = Path(HERE).name
    assert {where(n) for n in non_leaf(nodes(out.grad_fn))} == {
        (me, this_line("after-stale"), "net.0"),
        (me, this_line("double-mul"), "net.1"),
    }


def custom_activation(t: torch.Tensor) -> torch.Tensor:
    return Square.apply(t)  # a user callable that is no module: the library module's line


def test_user_callable_inside_a_library_module_gets_the_call_line() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, activation=custom_activation, batch_first=True
    )
    x = torch.randn(2, 3, 8)
    with Provenance():
        out = layer(x)  # @layer-call
    squares = [n for n in non_leaf(nodes(out.grad_fn)) if type(n).__name__ == "SquareBackward"]
    assert [where(n) for n in squares] == [(Path(HERE).name, this_line("layer-call"), "layer")]


def test_checkpointed_library_module() -> None:
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    x = torch.randn(2, 4, requires_grad=True)
    with Provenance():
        y = checkpoint(body, x, use_reentrant=False)  # @ckpt-seq
        loss = y.sum()
        before = snapshot(loss.grad_fn)
        loss.backward(retain_graph=True)  # runs the recompute
        assert snapshot(loss.grad_fn) == before
    spots = {where(n) for n in non_leaf(nodes(y.grad_fn))}
    me, line = Path(HERE).name, this_line("ckpt-seq")
    assert spots == {(me, line, "body.0"), (me, line, "body.1"), (me, line, "body.2")}


def test_library_module_on_another_thread_leaves_this_thread_alone() -> None:
    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    results: list[Any] = []
    x = torch.randn(2, 3)
    with Provenance():
        before = mode_stack()
        thread = threading.Thread(target=lambda: results.append(net(x)))
        thread.start()
        thread.join()
        assert mode_stack() == before
        mine = net(x)  # @main-thread
    assert source_of(results[0].grad_fn) is None
    assert source_of(mine.grad_fn)["line"] == this_line("main-thread")


def test_scopes_hold_no_module_frame_or_tensor() -> None:
    import gc
    import weakref

    from backstep.engine.provenance.scopes import SCOPE_KEY, Region, Scope

    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    x = torch.randn(2, 3, requires_grad=True)
    with Provenance():
        out = net(x)
    region = node_metadata(out.grad_fn)[SCOPE_KEY]
    assert type(region) is Region
    assert region.module is region.origin is region.caller is region.versions is None
    list(nodes(out.grad_fn))  # annotate: Scopes now
    scopes = [node_metadata(n)[SCOPE_KEY] for n in non_leaf(nodes(out.grad_fn))]
    assert scopes and all(type(s) is Scope for s in scopes)
    for holder in (region, *scopes):
        for name in holder.__slots__:
            value = getattr(holder, name, None)
            assert not isinstance(value, (nn.Module, torch.Tensor)), name
            assert type(value).__name__ != "frame", name
    ref = weakref.ref(net)
    del net
    gc.collect()
    assert ref() is None  # the graph (alive) does not keep the module alive


# -- a GPT-style model written here ----------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)  # @qkv
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # @scores
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        weights = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)  # @softmax
        out = (weights @ v).transpose(1, 2).reshape(batch, seq, width)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))  # @mlp


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16, heads: int = 2, depth: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)  # @embed
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def gpt_loss(gpt: TinyGPT, idx: torch.Tensor) -> torch.Tensor:
    logits = gpt(idx)
    return F.cross_entropy(logits.flatten(0, 1), idx.flatten())  # @xent


def make_gpt() -> tuple[TinyGPT, torch.Tensor]:
    torch.manual_seed(0)
    return TinyGPT(), torch.randint(0, 32, (2, 6))


def test_gpt_lines_and_modules() -> None:
    gpt, idx = make_gpt()
    with Provenance():
        loss = gpt_loss(gpt, idx)
    by_name: dict[str, set[tuple[str, int, str | None] | None]] = {}
    for node in non_leaf(nodes(loss.grad_fn)):
        by_name.setdefault(type(node).__name__, set()).add(where(node))
    me = Path(HERE).name
    assert by_name["SoftmaxBackward0"] == {
        (me, this_line("softmax"), f"gpt.blocks.{i}.attn") for i in (0, 1)
    }
    assert by_name["SplitBackward0"] == {
        (me, this_line("qkv"), f"gpt.blocks.{i}.attn") for i in (0, 1)
    }
    assert by_name["EmbeddingBackward0"] == {(me, this_line("embed"), "gpt.tok")}
    assert by_name["GeluBackward0"] == {
        (me, this_line("mlp"), f"gpt.blocks.{i}.mlp.1") for i in (0, 1)
    }
    assert by_name["NllLossBackward0"] == {(me, this_line("xent"), None)}
    assert (me, this_line("scores"), "gpt.blocks.1.attn") in by_name["DivBackward0"]
    assert all(None not in spots for spots in by_name.values())


def test_gpt_gradients_bit_identical() -> None:
    gpt, idx = make_gpt()
    gpt_loss(gpt, idx).backward()
    plain = grads(gpt)
    gpt.zero_grad()
    with Provenance():
        gpt_loss(gpt, idx).backward()
    traced = grads(gpt)
    assert plain.keys() == traced.keys() and len(plain) > 10
    assert all(torch.equal(plain[k], traced[k]) for k in plain)


# -- custom Functions, checkpoint ------------------------------------------------------------


def test_custom_function() -> None:
    x = torch.randn(3, requires_grad=True)
    with Provenance():
        y = x.sin()  # @fn-before
        z = Square.apply(y)  # @fn-apply
        w = z * 3  # @fn-after
    square = w.grad_fn.next_functions[0][0]
    list(nodes(w.grad_fn))
    assert type(square).__name__ == "SquareBackward"
    assert source_of(square)["line"] == this_line("fn-apply")
    assert source_of(w.grad_fn)["line"] == this_line("fn-after")
    assert source_of(y.grad_fn)["line"] == this_line("fn-before")
    w.sum().backward()
    assert torch.equal(x.grad, 6 * x.detach().sin() * x.detach().cos())


def test_uninstall_restores_function_apply_and_mode() -> None:
    original = Function.__dict__["apply"]
    depth = torch._C._len_torch_function_stack()
    provenance = Provenance()
    provenance.install()
    provenance.install()  # idempotent
    assert Function.__dict__["apply"] is not original
    assert torch._C._len_torch_function_stack() == depth + 1
    provenance.uninstall()
    provenance.uninstall()
    assert Function.__dict__["apply"] is original
    assert torch._C._len_torch_function_stack() == depth
    x = torch.randn(2, requires_grad=True)
    assert source_of((x * 2).grad_fn) is None


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))  # @inner


def snapshot(root: Any) -> dict[Any, tuple[Any, Any]]:
    """Each node's tags, keyed by the node itself: before torch 2.13 a node's Python object dies
    with its last reference and the next one may reuse its id for another node."""
    return {n: (source_of(n), module_of(n)) for n in nodes(root)}


def test_checkpoint_non_reentrant() -> None:
    torch.manual_seed(0)
    inner = Inner()
    x = torch.randn(2, 4, requires_grad=True)
    with Provenance():
        y = checkpoint(inner, x, use_reentrant=False)  # @ckpt-nr
        loss = y.sum()
        before = snapshot(loss.grad_fn)
        spots = {where(n) for n in non_leaf(nodes(loss.grad_fn))}
        loss.backward(retain_graph=True)  # runs the recompute
        assert snapshot(loss.grad_fn) == before
    me = Path(HERE).name
    assert (me, this_line("inner"), "inner") in spots
    assert (me, this_line("inner"), "inner.fc") in spots


def test_checkpoint_reentrant() -> None:
    torch.manual_seed(0)
    inner = Inner()
    x = torch.randn(2, 4, requires_grad=True)
    with Provenance():
        y = checkpoint(inner, x, use_reentrant=True)  # @ckpt-r
        loss = y.sum()
        before = snapshot(loss.grad_fn)
        loss.backward(retain_graph=True)
        assert snapshot(loss.grad_fn) == before
    node = loss.grad_fn.next_functions[0][0]
    assert type(node).__name__ == "CheckpointFunctionBackward"
    assert source_of(node)["line"] == this_line("ckpt-r")


def test_checkpoint_gradients_bit_identical() -> None:
    torch.manual_seed(0)
    inner = Inner()
    x = torch.randn(2, 4)
    results = []
    for on in (False, True):
        for reentrant in (False, True):
            inner.zero_grad()
            with Provenance() if on else _nothing():
                checkpoint(inner, x.requires_grad_(), use_reentrant=reentrant).sum().backward()
            results.append(grads(inner))
    for other in results[1:]:
        assert all(torch.equal(results[0][k], other[k]) for k in results[0])


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- what must stay unrecorded -----------------------------------------------------------------


def test_nodes_before_install_have_no_source() -> None:
    x = torch.randn(3, requires_grad=True)
    early = x.exp()  # created before install
    with Provenance():
        late = early * 2  # @late
    annotate([late.grad_fn])
    assert source_of(early.grad_fn) is None and module_of(early.grad_fn) is None
    assert source_of(late.grad_fn)["line"] == this_line("late")
    after = late + 1
    assert source_of(after.grad_fn) is None


def test_other_threads_get_no_source() -> None:
    result: list[Any] = []
    x = torch.randn(3, requires_grad=True)

    def work() -> None:
        result.append((x * 2).grad_fn)

    with Provenance():
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert source_of(result[0]) is None


def test_module_named_from_self_attribute_or_class() -> None:
    class Trainer:
        def __init__(self) -> None:
            self.net = nn.Linear(3, 3)

        def run(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    x = torch.randn(2, 3)
    with Provenance():
        out = Trainer().run(x)
        anonymous = nn.Linear(3, 1)(x)
    assert module_of(out.grad_fn) == "net"
    assert module_of(anonymous.grad_fn) == "Linear"


def test_internal_failure_is_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    from backstep.engine.provenance import tagging as provenance_tagging
    from backstep.engine.provenance.modules import ModuleTracker

    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(provenance_tagging, "find_source", broken)
    monkeypatch.setattr(ModuleTracker, "_place", broken)
    gpt, idx = make_gpt()
    with Provenance():
        loss = gpt_loss(gpt, idx)
        loss.backward()
    assert source_of(loss.grad_fn) is None
    assert all(p.grad is not None for p in gpt.parameters())


def test_user_errors_unchanged() -> None:
    with Provenance(), pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be"):
        nn.Linear(3, 3)(torch.randn(2, 4))


# -- saved versions and in-place history -------------------------------------------------------


@needs_saved_data
def test_saved_versions_recorded_at_creation() -> None:
    x = torch.randn(3, requires_grad=True)
    with Provenance():
        a = x * 1
        y = a.exp()
        y.add_(1)  # bumps the saved result
    exp = y.grad_fn.next_functions[0][0]
    assert type(exp).__name__ == "ExpBackward0"
    assert saved_versions_of(exp) == {"result": 0}
    assert exp._raw_saved_result.data._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_history_names_the_line() -> None:
    x = torch.randn(4, requires_grad=True)
    with Provenance():
        b = x.clone()
        b.add_(1)  # @add
        b[0] = 5.0  # @setitem
        view = b[1:]
        view.mul_(2)  # @view
        b += 1  # @iadd
        plain = torch.zeros(3)
        torch.add(plain, 1, out=plain)  # @out
    history = inplace_history(b)
    assert [(h["op"], h["line"], h["version"]) for h in history] == [
        ("add_", this_line("add"), 1),
        ("__setitem__", this_line("setitem"), 2),
        ("mul_", this_line("view"), 3),
        ("add_", this_line("iadd"), 4),  # `b += 1` reaches torch as add_
    ]
    assert history[0]["code"] == "b.add_(1)  # @add"
    assert history[0]["file"] == HERE
    assert inplace_history(view) == history  # views share the base's history
    assert [h["line"] for h in inplace_history(plain)] == [this_line("out")]
    assert source_of(b.grad_fn)["line"] == this_line("iadd")  # the in-place op's own node
    assert inplace_history(torch.zeros(1)) == []


@needs_saved_data
def test_inplace_history_of_saved_tensors() -> None:
    """The diagnosis path: a saved tensor read without unpacking finds who modified it."""
    x = torch.randn(3, requires_grad=True)
    with Provenance():
        a = x * 1
        b = a.exp()  # saves its result b
        c = a.sin()  # saves its input a
        a.add_(1)  # @saved-input
        b.mul_(2)  # @saved-output
    saved_input = c.grad_fn._raw_saved_self.data
    saved_output = b.grad_fn.next_functions[0][0]._raw_saved_result.data
    assert [h["line"] for h in inplace_history(saved_input)] == [this_line("saved-input")]
    assert [h["line"] for h in inplace_history(saved_output)] == [this_line("saved-output")]


def test_inplace_history_does_not_keep_tensors_alive() -> None:
    with Provenance():
        t = torch.zeros(3)
        t.add_(1)
    key = id(t)
    assert key in provenance_inplace._history
    del t
    assert key not in provenance_inplace._history
    assert key not in provenance_inplace._by_storage.values()


def test_optimizer_step_recorded_on_parameters() -> None:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Provenance():
        model(torch.randn(3, 2)).sum().backward()
        optimizer.step()  # @opt
    history = inplace_history(model.weight)
    assert history and history[-1]["line"] == this_line("opt")


def test_metadata_keys_are_the_contract() -> None:
    x = torch.randn(2, requires_grad=True)
    lin = nn.Linear(2, 2)
    with Provenance():
        y = lin(x)
    assert node_metadata(y.grad_fn)[SOURCE_KEY]["line"] == source_of(y.grad_fn)["line"]
    assert node_metadata(y.grad_fn)[MODULE_KEY] == "lin"
    assert y.grad_fn.metadata[MODULE_KEY] == "lin"  # once read, in the node's own metadata
