"""Data-parallel training step with gradient accumulation and clipping, written the usual way
(issue 33), for `planproof capture --axis dp`.

An MLP with ReLU and a LayerNorm; each rank takes its rows of the global batch; two
micro-batches, the loss of each divided by the number of micro-batches; gradients all-reduced
once after the last micro-batch (what DDP's `no_sync` does) and averaged;
`torch.nn.utils.clip_grad_norm_` on the averaged gradients; SGD with momentum.

`--bug`: gradients are clipped before they are all-reduced (each rank clips with its own norm).
`--bug-avg`: the all-reduced gradients are not divided by the world size.
`--micro N`: N micro-batches (default 2).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_AVG = "--bug-avg" in sys.argv

BATCH, IN, HID, OUT = 8, 6, 8, 4
MICRO = int(sys.argv[sys.argv.index("--micro") + 1]) if "--micro" in sys.argv else 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN, HID)
        self.norm = nn.LayerNorm(HID)
        self.fc2 = nn.Linear(HID, OUT)

    def forward(self, x):
        return self.fc2(self.norm(F.relu(self.fc1(x))))


def allreduce_gradients(model):
    ws = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            if not BUG_AVG:
                p.grad.div_(ws)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, IN, generator=g), name="data")
    target = cap.replicate(torch.randn(BATCH, OUT, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with cap.trace():
        # This rank's rows of the global batch, as DistributedSampler would give them.
        per_rank = BATCH // ws
        x = data[rank * per_rank:(rank + 1) * per_rank]
        y = target[rank * per_rank:(rank + 1) * per_rank]
        for xb, yb in zip(x.chunk(MICRO), y.chunk(MICRO)):
            loss = F.mse_loss(model(xb), yb) / MICRO
            loss.backward()
        if BUG:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
            allreduce_gradients(model)
        else:
            allreduce_gradients(model)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
    for name, p in model.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
