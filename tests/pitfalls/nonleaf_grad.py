"""Pitfall: reading .grad of a tensor computed from others (not a leaf)."""

import torch

x = torch.ones(3, requires_grad=True)
y = x * 2
y.sum().backward()
print("y.grad:", y.grad)  # expect: grad_none MulBackward0
