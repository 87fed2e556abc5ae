"""The script behind docs/module-view.svg: a small transformer-shaped model (blocks of
attention and MLP), one backward pass."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln(x))
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self, d: int = 8, layers: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(4, d)
        self.h = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.h:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = Model()
loss = model(torch.randn(5, 4)).pow(2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
