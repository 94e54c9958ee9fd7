"""Data parallel with `torch.optim.AdamW` used as-is (issue 33), for `planproof capture --axis dp`.

The optimizer makes its state on the first step inside the traced region (its step counters
with `torch.tensor`, its moments with `zeros_like`) and reads each step counter into Python
(`.item()` in torch 1.13's AdamW) to compute the bias corrections: the capture records those
reads, and verify says its verdict holds for the values read (the first step). Gradients are
all-reduced and averaged by hand, rows of the batch taken per rank inside the step.

`--bug`: the all-reduced gradients are not divided by the world size.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(8, 4, generator=g), name="data")
    target = cap.replicate(torch.randn(8, 2, generator=g), name="target")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with cap.trace():
        n = data.shape[0] // ws
        loss = F.mse_loss(model(data[rank * n:(rank + 1) * n]), target[rank * n:(rank + 1) * n])
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            if not BUG:
                p.grad /= ws
        opt.step()
    for name, p in model.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
