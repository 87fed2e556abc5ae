"""Clean: activation checkpointing both ways. Reentrant: the block's forward runs under
no_grad and its parameters get their gradient from the nested backward inside
CheckpointFunctionBackward. Non-reentrant: the recompute runs inside the outer pass."""

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Net(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(2))
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = h + checkpoint(block, h, use_reentrant=self.reentrant)
        return self.head(h)


torch.manual_seed(0)
for reentrant in (True, False):
    model = Net(reentrant)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(2):
        optimizer.zero_grad()
        loss = model(torch.randn(3, 4)).pow(2).mean()
        loss.backward()
        optimizer.step()
    block, head = nn.Linear(4, 4), nn.Linear(4, 1)
    x = torch.randn(2, 4, requires_grad=True)
    loss = head(checkpoint(block, x, use_reentrant=reentrant)).sum()
    loss.backward()
    print("block.weight.grad set:", block.weight.grad is not None)
