"""Pitfall: a layer defined in a model but never used in its forward gets no gradient."""

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.extra = nn.Linear(4, 4)  # forgotten in forward
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


torch.manual_seed(0)
model = Net()
loss = model(torch.randn(2, 4)).sum()
loss.backward()  # expect: grad_none -
print("extra.weight.grad:", model.extra.weight.grad)
