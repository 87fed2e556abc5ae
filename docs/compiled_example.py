"""The README's compiled-region picture: a small GPT block under torch.compile."""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc(self.ln(x)))
        return x + self.proj(h)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)).pow(2).mean()


torch.manual_seed(0)
model = torch.compile(Model(), backend="aot_eager")
loss = model(torch.randn(8, 32))
loss.backward()
print("loss", loss.item())
