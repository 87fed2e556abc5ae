"""Pitfall: calling backward twice through the same graph (its saved tensors are freed)."""

import torch

x = torch.tensor(2.0, requires_grad=True)
out = x**3  # expect: graph_freed PowBackward0
out.backward()  # related: freed_by
try:
    out.backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc)[:60])
