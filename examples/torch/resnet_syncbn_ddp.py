"""A small ResNet trained with torch DDP and SyncBatchNorm, as torchvision's `resnet.py` and its
reference training script (`--sync-bn`) write it (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

A stem `conv3x3 -> BatchNorm2d -> ReLU`, two `BasicBlock`s (`conv3x3, bn, relu, conv3x3, bn`,
the identity shortcut, or a strided 1x1 `downsample` conv + BatchNorm when the shape changes),
`nn.init.kaiming_normal_(mode="fan_out", nonlinearity="relu")` and BatchNorm weights 1 / biases
0 as torchvision initializes them, `F.adaptive_avg_pool2d(x, 1)`, `torch.flatten(x, 1)`, a
linear classifier, `F.cross_entropy`. The model is converted with
`nn.SyncBatchNorm.convert_sync_batchnorm(model)` before `DistributedDataParallel`, as
torchvision's train.py does with `--sync-bn`; SGD(momentum=0.9, weight_decay=1e-4). Each rank
takes its contiguous share of the batch. Outputs: the averaged loss, every parameter and every
BatchNorm running statistic after the step.

SyncBatchNorm normalizes by the statistics of the whole data-parallel batch, which is what the
single-device model computes on that batch: the correct twin. torch 1.13 runs SyncBatchNorm on
GPUs only, so the capture runs a stand-in with its semantics (docs/capture.md, "SyncBatchNorm").

`--bug`: the `convert_sync_batchnorm` line is left out (a training script run without
`--sync-bn`): every BatchNorm normalizes by its own rank's rows, so the forward, the gradients
and the running statistics differ from the single-device step.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
BATCH, CLASSES, SIZE = 8, 5, 6


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, num_classes=CLASSES, width=4):
        super().__init__()
        self.conv1 = conv3x3(3, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(width, width)
        downsample = nn.Sequential(conv1x1(width, 2 * width, 2), nn.BatchNorm2d(2 * width))
        self.layer2 = BasicBlock(width, 2 * width, stride=2, downsample=downsample)
        self.fc = nn.Linear(2 * width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.fc(x)


def name_of(n):
    return n.replace(".", "_")


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = ResNet()
    if not BUG:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    for n, p in model.named_parameters():
        cap.replicate(p, name=name_of(n), role="param")
    model = DDP(model)
    g = torch.Generator().manual_seed(1)
    images = cap.replicate(torch.randn(BATCH, 3, SIZE, SIZE, generator=g), name="images")
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES - 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    model.train()
    with cap.trace():
        image, target = images.chunk(ws)[rank], labels.chunk(ws)[rank]
        output = model(image)
        loss = F.cross_entropy(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    for n, p in model.module.named_parameters():
        cap.output(name_of(n) + "_new", p, "R")
    for n, b in model.module.named_buffers():
        if b.is_floating_point():
            cap.output(name_of(n) + "_new", b, "R")
