"""Pitfall: torch.where hides NaN in the forward, not in the backward."""

import torch

x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
y = torch.where(x > 0, x.sqrt(), 0.0)  # expect: nonfinite SqrtBackward0
y.sum().backward()
print("x.grad:", x.grad.tolist())
