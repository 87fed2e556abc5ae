"""Scripts that train a small compiled GPT, shared by the torch.compile tests.

Each prints what must not change under backstep: every parameter's gradient as a hash of its
bytes, the loss in hex, and Dynamo's own counters (graph breaks, graphs, frames, recompiles)."""

from __future__ import annotations

GPT = """\
import hashlib
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

if os.environ.get("USE_ATTACH"):
    import backstep

    backstep.attach(trace=os.environ["USE_ATTACH"])


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=32, d=16, heads=2, layers=2, block=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


torch.manual_seed(0)
model = GPT()
compiled = torch.compile(model, backend=sys.argv[1])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    idx = torch.randint(0, 32, (2, 8))
    loss = compiled(idx, torch.roll(idx, 1, 1))
    loss.backward()
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode() + bytes(p.grad.untyped_storage()))
    print(step, loss.item().hex(), digest.hexdigest()[:16])
    opt.step()
    opt.zero_grad()
print("graph_breaks", sum(counters["graph_break"].values()))
print("unique_graphs", counters["stats"]["unique_graphs"])
print("frames", dict(counters["frames"]))
print("recompiles", sum(counters["recompiles"].values()))
"""
