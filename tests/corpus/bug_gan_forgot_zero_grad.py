"""Bug: the DCGAN loop without netD.zero_grad(): the discriminator's next step uses the gradient
the generator's pass added into its .grad after its step (the pass the diagnosis names)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
nz = 4
netG = nn.Sequential(nn.Linear(nz, 8), nn.ReLU(), nn.Linear(8, 6), nn.Tanh())
netD = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=0.0002)
optimizerG = torch.optim.Adam(netG.parameters(), lr=0.0002)
for _ in range(3):
    real = torch.randn(4, 6).tanh()
    errD_real = criterion(netD(real).view(-1), torch.ones(4))
    errD_real.backward()
    fake = netG(torch.randn(4, nz))
    errD_fake = criterion(netD(fake.detach()).view(-1), torch.zeros(4))
    errD_fake.backward()
    optimizerD.step()  # related: optimizer_step
    netG.zero_grad()
    errG = criterion(netD(fake).view(-1), torch.ones(4))
    errG.backward()  # expect: grad_accumulating AccumulateGrad
    optimizerG.step()
print("done")
