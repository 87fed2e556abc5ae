"""Clean: torch.nn.utils.parametrize as the parametrizations tutorial uses it (a symmetric and
an orthogonal weight, weight_norm and spectral_norm), trained for a few steps."""

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils import parametrizations


class Symmetric(nn.Module):
    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return X.triu() + X.triu(1).transpose(-1, -2)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6),
                      nn.Linear(6, 1))
parametrize.register_parametrization(model[0], "weight", Symmetric())
parametrizations.orthogonal(model[2])
parametrizations.weight_norm(model[4])
parametrizations.spectral_norm(model[5])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 6), torch.randn(16, 1)
for _ in range(3):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
with parametrize.cached():  # one weight computation for several forwards
    loss = model(x).sum() + model(2 * x).sum()
optimizer.zero_grad()
loss.backward()
optimizer.step()
print(torch.allclose(model[0].weight, model[0].weight.T))
