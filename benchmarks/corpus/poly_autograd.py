"""Many tiny passes: PyTorch's polynomial tutorial (autograd), 2,000 backward calls on ~10 nodes.

Fits ``y = a + b x + c x^2 + d x^3`` to sin(x) with scalar leaves and manual SGD.
"""

import math
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
torch.manual_seed(0)
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)
a, b, c, d = (torch.randn((), requires_grad=True) for _ in range(4))
learning_rate = 1e-6
for t in range(steps):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum()
    if t % 500 == 99:
        print(t, loss.item())
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None
print(f"y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3")
