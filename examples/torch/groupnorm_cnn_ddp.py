"""A small CNN with GroupNorm under torch DDP (issue 33), for `planproof capture --nproc 2
--axis dp`: ResNet-GN style basic blocks as detectron2 and timm write them (`nn.Conv2d(bias=False)`
- `nn.GroupNorm(num_groups, channels)` - `F.relu`, two of them and the skip), a stem conv with
GroupNorm, global average pooling and a `nn.Linear` head; `F.cross_entropy`; SGD(momentum=0.9,
weight_decay=1e-4). GroupNorm normalizes each sample on its own, so unlike BatchNorm it needs no
SyncBatchNorm under DDP: the 2-process step is the single-device step.

`--bug`: the loss summed over the rank's samples (`reduction="sum"`) while the single device
averages over the batch: DDP's average then scales every gradient by the per-rank batch size."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
CLASSES = 3


class BasicBlockGN(nn.Module):
    def __init__(self, c, groups=2):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(groups, c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(groups, c)

    def forward(self, x):
        out = F.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return F.relu(out + x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.GroupNorm(2, 4), nn.ReLU(inplace=True))
        self.block = BasicBlockGN(4)
        self.fc = nn.Linear(4, CLASSES)

    def forward(self, x):
        x = self.block(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    for name, p in net.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.randn(8, 1, 5, 5, generator=g), name="images")
    labels = cap.replicate(torch.randint(0, CLASSES, (8,), generator=g), name="labels", values=(0, CLASSES))
    with cap.trace():
        model = DDP(net)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        x, y = images.chunk(ws)[rank], labels.chunk(ws)[rank]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, reduction="sum" if BUG else "mean")
        loss.backward()
        opt.step()
    for name, p in net.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
