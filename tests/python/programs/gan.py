"""Two optimizers per iteration (a GAN's discriminator, then generator): one step each."""

import torch
from torch import nn

gen = nn.Linear(8, 16)
disc = nn.Linear(16, 1)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
opt_g = torch.optim.Adam(gen.parameters(), lr=0.01)
for _ in range(14):
    fake = gen(torch.randn(4, 8))
    loss_d = disc(fake.detach()).mean() - disc(torch.randn(4, 16)).mean()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = -disc(gen(torch.randn(4, 8))).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
print("gan: done")
