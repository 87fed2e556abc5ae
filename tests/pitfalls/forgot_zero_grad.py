"""Pitfall: a training loop without zero_grad(): gradients pile up across steps."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data, target = torch.randn(16, 3), torch.randn(16, 1)
for _ in range(5):
    loss = ((model(data) - target) ** 2).mean()
    loss.backward()  # expect: grad_accumulating AccumulateGrad
    optimizer.step()
print("weight:", model.weight.detach().tolist())
