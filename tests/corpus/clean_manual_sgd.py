"""Clean: parameters updated by hand, their .grad zeroed in place or set to None each step."""

import torch

torch.manual_seed(0)
x, y = torch.randn(16, 3), torch.randn(16, 1)
w = torch.zeros(3, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
for _ in range(4):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        b -= 0.1 * b.grad
    w.grad.zero_()
    b.grad = None
print("w:", [round(v, 4) for v in w.flatten().tolist()])
