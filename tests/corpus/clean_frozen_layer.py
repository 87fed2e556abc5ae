"""Clean: a parameter frozen with requires_grad_(False) gets no gradient, as asked."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
model[0].weight.requires_grad_(False)
model(torch.randn(3, 4)).sum().backward()
print("first weight grad:", model[0].weight.grad)
