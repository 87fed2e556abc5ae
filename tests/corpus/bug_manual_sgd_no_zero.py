"""Bug: a hand-written SGD loop that never resets .grad: each update uses the sum of every
gradient so far."""

import torch

torch.manual_seed(0)
x, y = torch.randn(16, 3), torch.randn(16, 1)
w = torch.zeros(3, 1, requires_grad=True)
for _ in range(4):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()  # expect: grad_accumulating AccumulateGrad
    with torch.no_grad():
        w -= 0.1 * w.grad
print("w:", [round(v, 4) for v in w.flatten().tolist()])
