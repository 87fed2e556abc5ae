"""Clean: a loop that keeps its last few outputs (with their graphs) for a moving average:
kept graphs stop growing at the deque's length; and a loss logged with .item()."""

from collections import deque

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
recent: deque = deque(maxlen=3)
total = 0.0
for _ in range(12):
    optimizer.zero_grad()
    out = model(x)
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    optimizer.step()
    recent.append(out)
    total += loss.item()
print("mean loss:", round(total / 12, 4), len(recent))
