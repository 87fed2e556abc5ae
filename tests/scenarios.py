"""Training-code scenarios the engine must not change: each returns the tensors it computed
(gradients and values), or raises the error plain PyTorch raises."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

Result = dict[str, torch.Tensor | None]
SCENARIOS: dict[str, Callable[[], Result]] = {}


def scenario(fn: Callable[[], Result]) -> Callable[[], Result]:
    SCENARIOS[fn.__name__] = fn
    return fn


def _grads(module: nn.Module, prefix: str = "") -> Result:
    return {prefix + n: p.grad for n, p in module.named_parameters()}


@scenario
def graph_basics() -> Result:
    x = torch.tensor(2.0, requires_grad=True)
    y = torch.tensor(3.0, requires_grad=True)
    out = (x * y + x) ** 2
    out.backward()
    return {"x": x.grad, "y": y.grad, "out": out.detach()}


@scenario
def two_losses_retain_graph() -> Result:
    torch.manual_seed(0)
    enc = nn.Linear(8, 8)
    h1, h2 = nn.Linear(8, 1), nn.Linear(8, 1)
    z = torch.tanh(enc(torch.randn(4, 8)))
    loss1, loss2 = h1(z).pow(2).mean(), h2(z).abs().mean()
    loss1.backward(retain_graph=True)
    loss2.backward()
    return {**_grads(enc, "enc."), **_grads(h1, "h1."), **_grads(h2, "h2.")}


@scenario
def backward_twice_error() -> Result:
    x = torch.ones(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()
    return {"x": x.grad}


@scenario
def higher_order_grad() -> Result:
    x = torch.tensor(3.0, requires_grad=True)
    y = x**3
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    (g2,) = torch.autograd.grad(g, x)
    return {"g": g.detach(), "g2": g2}


@scenario
def double_backward() -> Result:
    torch.manual_seed(1)
    x = torch.randn(5, requires_grad=True)
    y = (x.sin() * x).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    g.norm().backward()
    return {"x": x.grad, "g": g.detach()}


@scenario
def plain_grad_backward_fails() -> Result:
    x = torch.tensor(3.0, requires_grad=True)
    (x**3).backward()
    assert x.grad is not None
    x.grad.backward()
    return {"x": x.grad}


@scenario
def retain_grad_nonleaf() -> Result:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    z = (y**2).sum()
    z.backward()
    return {"x": x.grad, "y": y.grad}


@scenario
def detach_and_no_grad() -> Result:
    torch.manual_seed(2)
    enc = nn.Linear(4, 4)
    head = nn.Linear(4, 1)
    x = torch.randn(3, 4)
    feats = enc(x).detach()
    with torch.no_grad():
        scale = enc(x).mean()
    loss = (head(feats) * scale).sum()
    loss.backward()
    return {**_grads(enc, "enc."), **_grads(head, "head.")}


@scenario
def accumulation_across_steps() -> Result:
    torch.manual_seed(3)
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(4, 3)).sum().backward()
    snapshot = {k: v.clone() for k, v in _grads(model).items()}
    opt.step()
    opt.zero_grad()
    for _ in range(2):
        (model(torch.randn(2, 3)) ** 2).mean().backward()
    return {**{"acc." + k: v for k, v in snapshot.items()}, **_grads(model)}


@scenario
def inplace_modification_error() -> Result:
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = a.exp()
    c = b * 2
    b.add_(1)
    c.sum().backward()
    return {"a": a.grad}


@scenario
def checkpoint_reentrant() -> Result:
    torch.manual_seed(4)
    block = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6))
    x = torch.randn(2, 6, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=True)
    y.pow(2).sum().backward()
    return {"x": x.grad, **_grads(block)}


@scenario
def checkpoint_nonreentrant() -> Result:
    torch.manual_seed(5)
    block = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6))
    x = torch.randn(2, 6, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=False)
    y.pow(2).sum().backward()
    return {"x": x.grad, **_grads(block)}


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):  # type: ignore[override]
        ctx.save_for_backward(a)
        return a**3

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (a,) = ctx.saved_tensors
        return g * 3 * a**2


class _NestedBackward(torch.autograd.Function):
    """A custom Function whose backward runs a backward of its own."""

    @staticmethod
    def forward(ctx, a):  # type: ignore[override]
        ctx.save_for_backward(a)
        return a.sin()

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (a,) = ctx.saved_tensors
        with torch.enable_grad():
            inner = a.detach().requires_grad_()
            torch.autograd.backward(inner.sin().sum())
        return g * inner.grad


@scenario
def custom_function() -> Result:
    x = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    _Cube.apply(x).sum().backward()
    return {"x": x.grad}


@scenario
def nested_backward_in_function() -> Result:
    x = torch.tensor([0.3, 1.2], requires_grad=True)
    (_NestedBackward.apply(x) * 2).sum().backward()
    return {"x": x.grad}


@scenario
def backward_inputs() -> Result:
    torch.manual_seed(6)
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    loss = (a * b).sum() + a.sum()
    loss.backward(inputs=[a])
    return {"a": a.grad, "b": b.grad}


@scenario
def several_roots_grad_tensors() -> Result:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y1, y2 = x * 2, x**2
    torch.autograd.backward([y1, y2], grad_tensors=[torch.ones(2), torch.tensor([0.5, -1.0])])
    return {"x": x.grad}


@scenario
def user_hooks_change_grads() -> Result:
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    model[0].register_full_backward_hook(lambda m, gin, gout: (gin[0] * 0.5,))
    x = torch.randn(3, 4, requires_grad=True)
    h = model[0](x)
    h.register_hook(lambda g: g.clamp(-0.1, 0.1))
    model[2](model[1](h)).sum().backward()
    return {"x": x.grad, **_grads(model)}


@scenario
def gan_step() -> Result:
    torch.manual_seed(8)
    gen = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    disc = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(gen.parameters(), 1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), 1e-3)
    real, noise = torch.randn(6, 2), torch.randn(6, 4)
    fake = gen(noise)
    bce = nn.BCEWithLogitsLoss()
    d_loss = bce(disc(real), torch.ones(6, 1)) + bce(disc(fake.detach()), torch.zeros(6, 1))
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = bce(disc(fake), torch.ones(6, 1))
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    return {**_grads(gen, "g."), **_grads(disc, "d."), "w": gen[0].weight.detach()}


@scenario
def rnn_truncated_bptt() -> Result:
    torch.manual_seed(9)
    rnn = nn.GRU(3, 5, batch_first=True)
    head = nn.Linear(5, 1)
    h = torch.zeros(1, 2, 5)
    data = torch.randn(2, 12, 3)
    grads = {}
    for k, chunk in enumerate(data.split(4, dim=1)):
        h = h.detach()
        out, h = rnn(chunk, h)
        head(out).pow(2).mean().backward()
        grads[f"w{k}"] = rnn.weight_hh_l0.grad.clone()
    return {**grads, **_grads(rnn), **_grads(head)}


@scenario
def transformer_encoder() -> Result:
    torch.manual_seed(10)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    enc(torch.randn(2, 5, 16)).pow(2).mean().backward()
    return _grads(enc)


@scenario
def sparse_embedding() -> Result:
    torch.manual_seed(11)
    emb = nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([[1, 2, 1], [5, 9, 1]])).sum().backward()
    grad = emb.weight.grad
    return {"weight": grad.coalesce().to_dense() if grad is not None else None}


@scenario
def complex_tensors() -> Result:
    torch.manual_seed(12)
    z = torch.randn(4, dtype=torch.complex64, requires_grad=True)
    w = torch.randn(4, dtype=torch.complex64, requires_grad=True)
    (z * w.conj()).abs().sum().backward()
    return {"z": z.grad, "w": w.grad}


@scenario
def deep_chain() -> Result:
    x = torch.tensor([0.5, -0.25], requires_grad=True)
    y = x
    for _ in range(3000):
        y = y * 1.0001 + 0.0001
    y.sum().backward()
    return {"x": x.grad}


@scenario
def nan_through_where() -> Result:
    x = torch.tensor([-1.0, 4.0], requires_grad=True)
    y = torch.where(x > 0, x.sqrt(), torch.zeros_like(x))
    y.sum().backward()
    return {"x": x.grad}


@scenario
def integer_and_bool_free() -> Result:
    torch.manual_seed(13)
    x = torch.randn(5, requires_grad=True)
    mask = x > 0
    idx = torch.argsort(x)
    (x[idx] * mask[idx].float()).sum().backward()
    return {"x": x.grad}


@scenario
def mse_functional() -> Result:
    torch.manual_seed(14)
    w = torch.randn(3, 3, requires_grad=True)
    x, t = torch.randn(4, 3), torch.randn(4, 3)
    F.mse_loss(x @ w, t).backward()
    return {"w": w.grad}
