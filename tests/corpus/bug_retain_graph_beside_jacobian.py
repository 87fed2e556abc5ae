"""Seeded bug: a training loop passes retain_graph=True that nothing needs, beside a jacobian
call (where torch passes retain_graph=True itself, not to be blamed)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for _ in range(3):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(retain_graph=True)  # expect: retain_graph_unused -
    optimizer.step()
    J = torch.autograd.functional.jacobian(lambda t: model(t).tanh(), x[:2])
del loss
print(J.shape)
