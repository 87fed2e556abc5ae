"""Pitfall: a .detach() inside the forward cuts the encoder off the loss."""

import torch
import torch.nn as nn


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(10, 5)
        self.decoder = nn.Linear(5, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x).detach())  # expect: grad_none -


torch.manual_seed(0)
model = AutoEncoder()
x = torch.randn(4, 10)
loss = ((model(x) - x) ** 2).mean()
loss.backward()
print("encoder.bias.grad:", model.encoder.bias.grad)
