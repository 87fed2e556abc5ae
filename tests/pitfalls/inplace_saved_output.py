"""Pitfall: modifying in place a tensor that a node saved for its backward."""

import torch

w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
x = torch.tensor([1.0, 2.0, 3.0])
h = torch.sigmoid(x * w)  # expect: inplace_modified SigmoidBackward0
h.mul_(2)  # related: inplace_op
try:
    (h * 3).sum().backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc)[:60])
