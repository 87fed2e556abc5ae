"""Shared benchmark workloads: each builder returns (model, make_loss).

``make_loss()`` runs one forward and returns a scalar loss; call ``.backward()`` on it to time the
backward. Builders seed torch, so two calls give identical models and inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Workload = tuple[nn.Module, Callable[[], torch.Tensor]]


def transformer_worst_case(layers: int = 32, seed: int = 0, device: str = "cpu") -> Workload:
    """Many small ops: a 32-layer nn.TransformerEncoder, d_model 64, 4 heads, batch 4, seq 32."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True
    )
    model = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).to(device)
    x = torch.randn(4, 32, 64).to(device)

    def make_loss() -> torch.Tensor:
        return model(x).pow(2).mean()

    return model, make_loss


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written out op by op, GPT-2 style."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q = q.view(batch, seq, self.heads, -1).transpose(1, 2)
        k = k.view(batch, seq, self.heads, -1).transpose(1, 2)
        v = v.view(batch, seq, self.heads, -1).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, seq, width))


class Block(nn.Module):
    """Pre-norm decoder block: attention then a GELU MLP, each with a residual."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A small GPT: token and position embeddings, decoder blocks, tied output head."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.ln(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def gpt_realistic(layers: int = 6, seed: int = 0, device: str = "cpu") -> Workload:
    """A realistic step: 6-layer GPT decoder, d_model 256, 8 heads, batch 8, seq 128."""
    torch.manual_seed(seed)
    vocab, context = 512, 128
    model = GPT(vocab, 256, 8, layers, context).to(device)
    idx = torch.randint(0, vocab, (8, context)).to(device)
    targets = torch.randint(0, vocab, (8, context)).to(device)

    def make_loss() -> torch.Tensor:
        return model(idx, targets)

    return model, make_loss


def gpt2(layers: int = 12, seed: int = 0, device: str = "cuda") -> Workload:
    """GPU scale, as measured on the H100: 12 GPT blocks, d768, 12 heads, batch 8, seq 512
    (attention gradients of 25M elements)."""
    torch.manual_seed(seed)
    vocab, context = 8192, 512
    model = GPT(vocab, 768, 12, layers, context).to(device)
    idx = torch.randint(0, vocab, (8, context)).to(device)
    targets = torch.randint(0, vocab, (8, context)).to(device)

    def make_loss() -> torch.Tensor:
        return model(idx, targets)

    return model, make_loss
