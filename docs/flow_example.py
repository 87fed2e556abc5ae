"""The script behind docs/gradient-flow.svg: a deep sigmoid MLP whose early layers' gradients
vanish (sigmoid's slope is at most 1/4 per layer)."""

import torch
from torch import nn

torch.manual_seed(0)
layers: list[nn.Module] = []
for _ in range(10):
    layers += [nn.Linear(16, 16), nn.Sigmoid()]
model = nn.Sequential(*layers, nn.Linear(16, 1))
x = torch.randn(32, 16)
loss = model(x).pow(2).mean()
loss.backward()
print("first / last weight grad norm:", model[0].weight.grad.norm().item(),
      model[-1].weight.grad.norm().item())
