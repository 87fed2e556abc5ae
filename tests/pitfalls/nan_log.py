"""Pitfall: log of a probability that is exactly 0 gives an infinite gradient, every step."""

import torch

logits = torch.tensor([30.0, -80.0, 0.0], requires_grad=True)
for _ in range(3):
    probs = torch.sigmoid(logits) * torch.tensor([1.0, 0.0, 1.0])
    loss = -torch.log(probs).sum()  # expect: nonfinite LogBackward0
    loss.backward()
print("logits.grad:", logits.grad.tolist())
