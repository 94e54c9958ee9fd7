"""A convolutional denoising autoencoder under torch DDP (issue 33), for `planproof capture
--nproc 2 --axis dp`, as image-restoration tutorials write it: images normalized with the
dataset's mean and std, an encoder of `nn.Conv2d` - `nn.Mish()` - `nn.AvgPool2d(2)` -
`nn.Conv2d` - `nn.Hardswish()`, a decoder of `nn.Upsample(scale_factor=2)` (nearest) -
`nn.Conv2d` - `nn.Softplus()` - `nn.Conv2d`; the noisy input is `x + 0.1 * noise`, the loss
`F.mse_loss` against the clean image; AdamW, `CosineAnnealingLR`, `GradScaler(enabled=use_amp)`
(AMP off on CPU), and an EMA of the weights kept for evaluation
(`ema_p.mul_(decay).add_(p.detach(), alpha=1 - decay)` under `torch.no_grad()`), two steps.

`--bug`: the batch normalized by its own mean and std (`(x - x.mean()) / x.std()`) instead of
the dataset's: under DDP each rank uses the statistics of its own images only."""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
MEAN, STD = 0.1307, 0.3081  # MNIST


class DenoisingAE(nn.Module):
    def __init__(self, ch=4):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, ch, 3, padding=1),
            nn.Mish(),
            nn.AvgPool2d(2),
            nn.Conv2d(ch, ch * 2, 3, padding=1),
            nn.Hardswish(),
        )
        self.decoder = nn.Sequential(
            nn.Upsample(scale_factor=2),
            nn.Conv2d(ch * 2, ch, 3, padding=1),
            nn.Softplus(),
            nn.Conv2d(ch, 1, 3, padding=1),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


@torch.no_grad()
def update_ema(ema_model, model, decay=0.99):
    for ema_p, p in zip(ema_model.parameters(), model.parameters()):
        ema_p.mul_(decay).add_(p.detach(), alpha=1 - decay)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = DenoisingAE()
    ema = copy.deepcopy(net)
    for p in ema.parameters():
        p.requires_grad_(False)
    for name, p in net.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    for name, p in ema.named_parameters():
        cap.replicate(p, name="ema_" + name.replace(".", "_"), role="optimizer_state")
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.rand(4, 1, 8, 8, generator=g), name="images")
    noise = cap.replicate(torch.randn(4, 1, 8, 8, generator=g), name="noise")
    use_amp = torch.cuda.is_available()
    with cap.trace():
        model = DDP(net)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
        scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
        clean, n = images.chunk(ws)[rank], noise.chunk(ws)[rank]
        for _ in range(2):
            if BUG:
                x = (clean - clean.mean()) / clean.std()
            else:
                x = (clean - MEAN) / STD
            noisy = x + 0.1 * n
            optimizer.zero_grad()
            with torch.autocast("cpu", enabled=use_amp):
                recon = model(noisy)
                loss = F.mse_loss(recon, x)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            update_ema(ema, net)
    for name, p in net.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
    for name, p in ema.named_parameters():
        cap.output("ema_" + name.replace(".", "_") + "_new", p, "R")
