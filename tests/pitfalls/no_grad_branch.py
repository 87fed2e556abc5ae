"""Pitfall: a branch computed under torch.no_grad() gives its layer no gradient."""

import torch
import torch.nn as nn

torch.manual_seed(0)
backbone = nn.Linear(6, 6)
gate = nn.Linear(6, 6)
head = nn.Linear(6, 1)
x = torch.randn(5, 6)
with torch.no_grad():
    weights = torch.sigmoid(gate(x))  # expect: grad_none -
loss = head(backbone(x) * weights).sum()
loss.backward()
print("gate.weight.grad:", gate.weight.grad)
