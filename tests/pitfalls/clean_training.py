"""No pitfall: a correct loop (zero_grad every step), two heads with retain_graph, and gradient
accumulation on purpose. Nothing here deserves a diagnosis."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
data, target = torch.randn(16, 5), torch.randn(16, 1)
for _ in range(4):
    optimizer.zero_grad()
    loss = ((model(data) - target) ** 2).mean()
    loss.backward()
    optimizer.step()

encoder, head_a, head_b = nn.Linear(5, 4), nn.Linear(4, 1), nn.Linear(4, 1)
features = encoder(data)
loss_a, loss_b = head_a(features).mean(), head_b(features).pow(2).mean()
loss_a.backward(retain_graph=True)
loss_b.backward()

model.zero_grad(set_to_none=False)
for chunk, goal in zip(data.split(4), target.split(4), strict=True):
    (((model(chunk) - goal) ** 2).mean() / 4).backward()
optimizer.step()
model.zero_grad(set_to_none=False)
((model(data) - target) ** 2).mean().backward()
print("done")
