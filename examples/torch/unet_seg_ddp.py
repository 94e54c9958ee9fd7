"""A small U-Net for binary segmentation under torch DDP (issue 33), for `planproof capture
--nproc 2 --axis dp`, written the way segmentation repos (milesial/Pytorch-UNet and its many
forks) write it: `DoubleConv` blocks (Conv2d - InstanceNorm2d - SiLU(inplace=True), twice), a
`nn.MaxPool2d(2)` down path, one up path by `nn.ConvTranspose2d(stride=2)` and one by
`F.interpolate(scale_factor=2, mode="bilinear", align_corners=False)`, `torch.cat` skip
connections, a 1x1 output conv; the loss is `F.binary_cross_entropy_with_logits(pos_weight=...)`
plus a soft Dice loss over the batch; `torch.cuda.amp.GradScaler(enabled=use_amp)` with AMP off
on CPU; Adam with `CosineAnnealingLR`; the loss logged averaged over the ranks. One step
(`--two-steps`: two).

The Dice loss is the mean over images of each image's Dice, so the average over ranks of the
ranks' means is the batch's mean.

`--bug`: a batch Dice (one ratio of sums over all the rank's pixels): each rank's ratio is over
its own images only, and the average of the ranks' ratios is not the batch's ratio."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
STEPS = 2 if "--two-steps" in sys.argv else 1


class DoubleConv(nn.Module):
    """(convolution => [IN] => SiLU) * 2"""

    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.InstanceNorm2d(mid_channels),
            nn.SiLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.InstanceNorm2d(out_channels),
            nn.SiLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels, bilinear=True):
        super().__init__()
        self.bilinear = bilinear
        if bilinear:
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        if self.bilinear:
            x1 = F.interpolate(x1, scale_factor=2, mode="bilinear", align_corners=False)
        else:
            x1 = self.up(x1)
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels=1, n_classes=1, base=4):
        super().__init__()
        self.inc = DoubleConv(n_channels, base)
        self.down1 = Down(base, base * 2)
        self.down2 = Down(base * 2, base * 2)
        self.up1 = Up(base * 4, base * 2, bilinear=True)
        self.up2 = Up(base * 2, base, bilinear=False)
        self.outc = nn.Conv2d(base, n_classes, kernel_size=1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.up1(x3, x2)
        x = self.up2(x, x1)
        return self.outc(x)


def dice_loss(logits, target, eps=1.0, per_image=True):
    probs = torch.sigmoid(logits)
    dims = (1, 2, 3) if per_image else (0, 1, 2, 3)
    inter = (probs * target).sum(dim=dims)
    union = probs.sum(dim=dims) + target.sum(dim=dims)
    dice = (2.0 * inter + eps) / (union + eps)
    return 1.0 - dice.mean()


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = UNet()
    for name, p in net.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.randn(4, 1, 8, 8, generator=g), name="images")
    masks = cap.replicate((torch.rand(4, 1, 8, 8, generator=g) > 0.7).float(), name="masks")
    use_amp = torch.cuda.is_available()
    with cap.trace():
        model = DDP(net)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
        grad_scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
        criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([2.0]))
        x, y = images.chunk(ws)[rank], masks.chunk(ws)[rank]
        for _ in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", enabled=use_amp):
                masks_pred = model(x)
                loss = criterion(masks_pred, y)
                loss = loss + dice_loss(masks_pred, y, per_image=not BUG)
            grad_scaler.scale(loss).backward()
            grad_scaler.step(optimizer)
            grad_scaler.update()
            scheduler.step()
            # the loss logged: averaged over the ranks (apex's reduce_tensor)
            epoch_loss = loss.detach().clone()
            dist.all_reduce(epoch_loss)
            epoch_loss /= ws
    cap.output("loss", epoch_loss, "R")
    for name, p in net.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
