"""Pitfall: two losses on a shared encoder, the first backward without retain_graph."""

import torch
import torch.nn as nn

torch.manual_seed(0)
encoder = nn.Linear(10, 5)
head_a, head_b = nn.Linear(5, 2), nn.Linear(5, 3)
features = encoder(torch.randn(4, 10))  # expect: graph_freed AddmmBackward0
loss_a = head_a(features).mean()
loss_b = head_b(features).mean()
loss_a.backward()  # related: freed_by
try:
    loss_b.backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc)[:60])
