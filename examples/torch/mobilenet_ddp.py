"""A small MobileNetV2-style classifier under torch DDP (issue 33), for
`planproof capture --nproc 2 --axis dp`: a stride-2 stem `nn.Conv2d` + `nn.ReLU6(inplace=True)`,
one inverted residual block as torchvision's MobileNetV2 writes it (1x1 expansion, 3x3 depthwise
conv with `groups=hidden`, `nn.ReLU6(inplace=True)` after each, linear 1x1 projection, the
skip connection), `nn.AdaptiveAvgPool2d(1)`, and a head `nn.Linear` - `nn.ELU(inplace=True)` -
`nn.Dropout(0.2)` - `nn.Linear`; `F.cross_entropy` with `label_smoothing=0.1`;
`torch.optim.SGD(momentum=0.9, nesterov=True, weight_decay=4e-5)`. BatchNorm is left out on
purpose: without SyncBatchNorm a rank's batch statistics are not the single device's
(ddp_cnn.py `--bn` shows that). Inputs are scaled so that ReLU6's upper clamp and ELU's
negative branch are both reached (the golden check then covers every branch of
hardtanh / elu and their backward).

`--bug`: the labels are sharded by strided rows (`y[rank::ws]`, as a DistributedSampler would
hand them out) while the images are sharded by chunks (`x.chunk(ws)[rank]`): each rank
trains on images paired with other images' labels."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
CLASSES = 5


class InvertedResidual(nn.Module):
    def __init__(self, c, expand_ratio=4):
        super().__init__()
        hidden = c * expand_ratio
        self.conv = nn.Sequential(
            nn.Conv2d(c, hidden, 1),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, c, 1),
        )

    def forward(self, x):
        return x + self.conv(x)


class MobileNetTiny(nn.Module):
    def __init__(self, num_classes=CLASSES):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU6(inplace=True), InvertedResidual(4))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(4, 12), nn.ELU(inplace=True), nn.Dropout(0.2), nn.Linear(12, num_classes))

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = MobileNetTiny()
    for name, p in net.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.randn(8, 3, 6, 6, generator=g) * 6, name="images")
    labels = cap.replicate(torch.randint(0, CLASSES, (8,), generator=g), name="labels", values=(0, CLASSES))
    with cap.trace():
        model = DDP(net)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=4e-5)
        x = images.chunk(ws)[rank]
        y = labels[rank::ws] if BUG else labels.chunk(ws)[rank]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
    for name, p in net.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
