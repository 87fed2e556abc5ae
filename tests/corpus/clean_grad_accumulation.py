"""Clean: gradient accumulation on purpose, three ways: zero at the start of each group, zero
right after each step, and zeroing in place (set_to_none=False)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
data, target = torch.randn(12, 5), torch.randn(12, 1)
chunks = list(zip(data.split(2), target.split(2), strict=True))
for i, (x, y) in enumerate(chunks):
    if i % 3 == 0:
        optimizer.zero_grad()
    (((model(x) - y) ** 2).mean() / 3).backward()
    if i % 3 == 2:
        optimizer.step()
optimizer.zero_grad()
for i, (x, y) in enumerate(chunks):
    (((model(x) - y) ** 2).mean() / 2).backward()
    if i % 2 == 1:
        optimizer.step()
        optimizer.zero_grad()
for x, y in chunks:
    ((model(x) - y) ** 2).mean().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
print("done")
