"""Nested passes: a small pre-norm transformer whose blocks run under reentrant checkpointing.

Every ``loss.backward()`` runs one nested backward per block (CheckpointFunctionBackward), as a
BERT loop with ``gradient_checkpointing_enable()`` does; pure torch, AdamW, 10 steps.
"""

import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.head = nn.Linear(width, 2)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)
        return self.head(x[:, 0])


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
torch.manual_seed(0)
model = Encoder(vocab=1000, width=64, heads=4, layers=8)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
idx = torch.randint(0, 1000, (4, 32))
labels = torch.randint(0, 2, (4,))
for step in range(steps):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(idx), labels)
    loss.backward()
    optimizer.step()
    if step % 5 == 0:
        print(step, loss.item())
print(sum(p.double().sum().item() for p in model.parameters()))
