"""Clean: a backbone frozen with requires_grad_(False) inside the model, and a linear probe on
a separate backbone run under torch.no_grad()."""

import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


torch.manual_seed(0)
model = Classifier()
model.backbone.requires_grad_(False)
optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
x, y = torch.randn(4, 6), torch.tensor([0, 1, 2, 1])
for _ in range(2):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()

backbone = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
probe = nn.Linear(8, 3)
probe_optimizer = torch.optim.Adam(probe.parameters(), lr=0.01)
for _ in range(2):
    probe_optimizer.zero_grad()
    with torch.no_grad():
        features = backbone(x)
    nn.functional.cross_entropy(probe(features), y).backward()
    probe_optimizer.step()
print("done")
