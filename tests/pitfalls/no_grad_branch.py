"""Pitfall: a branch of a model computed under torch.no_grad() gives its layer no gradient,
while the rest of the model trains."""

import torch
import torch.nn as nn


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(6, 6)
        self.gate = nn.Linear(6, 6)
        self.head = nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            weights = torch.sigmoid(self.gate(x))  # expect: grad_none -
        return self.head(self.backbone(x) * weights)


torch.manual_seed(0)
model = Gated()
loss = model(torch.randn(5, 6)).sum()
loss.backward()
print("gate.weight.grad:", model.gate.weight.grad)
