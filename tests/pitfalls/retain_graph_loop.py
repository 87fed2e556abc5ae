"""Pitfall: retain_graph=True in a loop that builds a new graph every step."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 10), torch.randn(32, 1)
for _ in range(4):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(retain_graph=True)  # expect: retain_graph_unused -
    optimizer.step()
del loss
