"""Pitfall: optimizer.step() between two backward passes through one retained graph: the step
changes in place the weights the graph saved."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
output = model(torch.randn(8, 4))  # expect: inplace_modified AddmmBackward0
loss1 = output.pow(2).mean()
loss2 = output.abs().mean()
loss1.backward(retain_graph=True)
optimizer.step()  # related: inplace_op
try:
    loss2.backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc)[:60])
