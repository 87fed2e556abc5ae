"""Bug: a layer never used in the forward, in a model that checkpoints its blocks (reentrant):
the blocks get their gradient from the nested pass, the unused layer from none."""

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.extra = nn.Linear(4, 4)  # forgotten in forward
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=True))


torch.manual_seed(0)
model = Net()
x = torch.randn(2, 4, requires_grad=True)
model(x).sum().backward()  # expect: grad_none -
print("extra.weight.grad:", model.extra.weight.grad)
