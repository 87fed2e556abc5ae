"""Clean: pytorch/examples' DCGAN loop (two optimizers). The generator's pass adds into the
discriminator's .grad after its step, but netD.zero_grad() clears it before the next one: no
step ever uses a stale gradient."""

import torch
import torch.nn as nn

torch.manual_seed(0)
nz = 4
netG = nn.Sequential(nn.Linear(nz, 8), nn.BatchNorm1d(8), nn.ReLU(True), nn.Linear(8, 6), nn.Tanh())
netD = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2, inplace=True), nn.Linear(8, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
real_label, fake_label = 1, 0
for i in range(3):
    netD.zero_grad()
    real_cpu = torch.randn(4, 6).tanh()
    label = torch.full((4,), real_label, dtype=real_cpu.dtype)
    output = netD(real_cpu).view(-1)
    errD_real = criterion(output, label)
    errD_real.backward()
    noise = torch.randn(4, nz)
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach()).view(-1)
    errD_fake = criterion(output, label)
    errD_fake.backward()
    errD = errD_real + errD_fake
    optimizerD.step()
    netG.zero_grad()
    label.fill_(real_label)
    output = netD(fake).view(-1)
    errG = criterion(output, label)
    errG.backward()
    optimizerG.step()
    print(f"[{i}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}")
