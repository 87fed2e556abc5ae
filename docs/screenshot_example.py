"""The script behind docs/screenshot.svg: a two-layer MLP, one training step."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
x = torch.randn(16, 4)
target = torch.randn(16, 1)

print("forward: batch of", x.shape[0])
loss = nn.functional.mse_loss(model(x), target)
print(f"loss = {loss.item():.4f}")
loss.backward()
print("fc grad norms:", [round(p.grad.norm().item(), 4) for p in model.parameters()])
