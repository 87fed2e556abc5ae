"""Bug: the PyTorch FAQ's leak: the running loss is summed as a tensor, so every step's graph
stays alive through it (``loss.item()`` was meant)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
total_loss = 0
for _ in range(8):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss  # expect: graph_kept_alive -
print("mean loss:", round(total_loss.item() / 8, 4))
