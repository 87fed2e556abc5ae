"""Clean: a GAN kept in one module. The discriminator's step leaves the generator without a
gradient (it is detached on purpose); the generator's step gives it one."""

import torch
import torch.nn as nn


class GAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.G = nn.Sequential(nn.Linear(3, 6), nn.Tanh())
        self.D = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())


torch.manual_seed(0)
gan = GAN()
opt_d = torch.optim.Adam(gan.D.parameters(), lr=1e-3)
opt_g = torch.optim.Adam(gan.G.parameters(), lr=1e-3)
bce = nn.BCELoss()
for _ in range(2):
    opt_d.zero_grad()
    fake = gan.G(torch.randn(4, 3))
    d_loss = bce(gan.D(torch.randn(4, 6)).view(-1), torch.ones(4)) + bce(
        gan.D(fake.detach()).view(-1), torch.zeros(4))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(gan.D(fake).view(-1), torch.ones(4))
    g_loss.backward()
    opt_g.step()
print("done")
