"""Pitfall (or intent): a parameter with requires_grad=False gets no gradient."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
model[0].weight.requires_grad_(False)
model(torch.randn(3, 4)).sum().backward()  # expect: grad_none -
print("first weight grad:", model[0].weight.grad)
