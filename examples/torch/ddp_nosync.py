"""torch DDP with gradient accumulation under `no_sync()` (issue 33), for
`planproof capture --nproc 2 --axis dp`.

The model is wrapped in `torch.nn.parallel.DistributedDataParallel`; a `DistributedSampler`-
style split gives each rank its rows; two micro-batches, the first under `model.no_sync()`
(no all-reduce), the second synchronizing; the loss of each divided by the number of
micro-batches; SGD. (DDP's reducer runs in C++; the capture runs a Python module with DDP's
semantics in its place, docs/capture.md.)

`--bug`: the gradients are additionally divided by the world size after DDP's averaging
(a hand-written averaging left in after switching to DDP).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
MICRO = 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(8, 6, generator=g), name="data")
    target = cap.replicate(torch.randn(8, 4, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        x, y = data[rank::ws], target[rank::ws]
        xs, ys = x.chunk(MICRO), y.chunk(MICRO)
        with model.no_sync():
            F.mse_loss(model(xs[0]), ys[0]).div(MICRO).backward()
        F.mse_loss(model(xs[1]), ys[1]).div(MICRO).backward()
        if BUG:
            for p in model.parameters():
                p.grad /= ws
        opt.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
