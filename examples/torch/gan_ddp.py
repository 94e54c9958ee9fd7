"""A GAN trained one step the way PyTorch's DCGAN tutorial trains it, with MLP networks on
flattened images (the "vanilla GAN on MNIST" of countless tutorials), both networks under DDP
(issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

`Generator`: `nn.Linear`, `nn.LeakyReLU(0.2, inplace=True)`, `nn.Linear`, `nn.Tanh`;
`Discriminator`: `nn.Linear`, `nn.LeakyReLU(0.2, inplace=True)`, `nn.Dropout(0.3)`,
`nn.Linear`, `nn.Sigmoid`; `weights_init` by `nn.init.normal_(m.weight, 0.0, 0.02)` through
`apply`; `criterion = nn.BCELoss()`; `torch.full((b_size,), real_label, dtype=torch.float)`
labels; noise `torch.randn(b_size, nz)`; the tutorial's step: `netD.zero_grad()`, `errD_real`
backward, `errD_fake` on `fake.detach()` backward, `optimizerD.step()`, then `netG.zero_grad()`,
`label.fill_(real_label)`, `errG` backward through the discriminator, `optimizerG.step()`;
`Adam(lr=0.0002, betas=(0.5, 0.999))` for both; the logged losses averaged over the ranks by
apex's `reduce_tensor`. Each network wrapped in `DistributedDataParallel`; each rank draws its
own part of the batch's noise.

`--bug`: the generator is not wrapped in DDP (only the discriminator is), so its gradients are
never averaged and the ranks' generators drift apart.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
nz, ngf, ndf, image_size, batch_size = 4, 16, 16, 16, 8
real_label, fake_label = 1.0, 0.0


def reduce_tensor(tensor):
    # the logged losses averaged over the ranks (NVIDIA's apex ImageNet example's helper)
    rt = tensor.clone()
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    rt /= dist.get_world_size()
    return rt


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight.data, 0.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            nn.Linear(nz, ngf),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(ngf, image_size),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            nn.Linear(image_size, ndf),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Dropout(0.3),
            nn.Linear(ndf, 1),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    for prefix, m in (("G", netG), ("D", netD)):
        for name, p in m.named_parameters():
            cap.replicate(p, name=prefix + "_" + name.replace(".", "_"), role="param")
    ddp_G = netG if BUG else DDP(netG)
    ddp_D = DDP(netD)
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(ddp_D.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(ddp_G.parameters(), lr=0.0002, betas=(0.5, 0.999))
    g = torch.Generator().manual_seed(6)
    images = cap.replicate(torch.rand(batch_size, image_size, generator=g) * 2 - 1, name="real_images")
    with cap.trace():
        real_cpu = images.chunk(ws)[rank]
        b_size = real_cpu.size(0)
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ddp_D.zero_grad()
        label = torch.full((b_size,), real_label, dtype=torch.float)
        output = ddp_D(real_cpu).view(-1)
        errD_real = criterion(output, label)
        errD_real.backward()
        noise = torch.randn(b_size, nz)
        fake = ddp_G(noise)
        label.fill_(fake_label)
        output = ddp_D(fake.detach()).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward()
        optimizerD.step()
        # (2) Update G network: maximize log(D(G(z)))
        ddp_G.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = ddp_D(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()
        errD = reduce_tensor((errD_real + errD_fake).detach())
        errG = reduce_tensor(errG.detach())
    cap.output("loss_D", errD, "R")
    cap.output("loss_G", errG, "R")
    for prefix, m in (("G", netG), ("D", netD)):
        for name, p in m.named_parameters():
            cap.output(prefix + "_" + name.replace(".", "_") + "_new", p, "R")
