"""Pitfall: an in-place op on a tensor that a later op saved as its input."""

import torch

w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
a = w * 2
b = a**2  # expect: inplace_modified PowBackward0
a.add_(1)  # related: inplace_op
try:
    b.sum().backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc)[:60])
