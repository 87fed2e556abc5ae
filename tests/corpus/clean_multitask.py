"""Clean: a shared trunk with two task heads: the losses summed, then the tasks taking turns
(each step leaves the other head without a gradient, on purpose), from one line and from two."""

import torch
import torch.nn as nn


class MultiTask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(5, 8), nn.ReLU())
        self.head_a = nn.Linear(8, 1)
        self.head_b = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        h = self.trunk(x)
        return self.head_a(h) if task == "a" else self.head_b(h)


torch.manual_seed(0)
model = MultiTask()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, ya, yb = torch.randn(4, 5), torch.randn(4, 1), torch.tensor([0, 2, 1, 0])


def task_loss(task: str) -> torch.Tensor:
    out = model(x, task)
    return nn.functional.mse_loss(out, ya) if task == "a" else nn.functional.cross_entropy(out, yb)


for _ in range(2):
    optimizer.zero_grad()
    (task_loss("a") + task_loss("b")).backward()
    optimizer.step()
for step in range(4):
    optimizer.zero_grad()
    task_loss("ab"[step % 2]).backward()
    optimizer.step()
for _ in range(2):
    optimizer.zero_grad()
    task_loss("a").backward()
    optimizer.step()
    optimizer.zero_grad()
    task_loss("b").backward()
    optimizer.step()
print("done")
