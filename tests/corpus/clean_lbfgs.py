"""Clean: LBFGS with a closure that zeroes and recomputes the gradient at each evaluation."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
x, y = torch.randn(8, 3), torch.randn(8, 1)


def closure() -> torch.Tensor:
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    return loss


for _ in range(2):
    optimizer.step(closure)
print("done")
