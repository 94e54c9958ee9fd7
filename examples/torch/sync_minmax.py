"""Data-parallel training with input statistics synchronized across ranks (issue 33), for
`planproof capture --nproc 2 --axis dp`.

Each rank holds its rows of the batch. A min-max feature scaler computes each feature's
minimum and maximum over the whole batch, as an observer does (`amin` / `amax` under
`torch.no_grad()`, then `dist.all_reduce(..., op=ReduceOp.MIN)` and `op=ReduceOp.MAX`), and
scales the inputs to [0, 1]; an MLP with a sigmoid output gives each sample's likelihood; the
loss is the mean negative log-likelihood; gradients are averaged with `op=ReduceOp.AVG`; SGD.
As an evaluation metric, the batch's joint likelihood: the product of each rank's samples'
(`torch.prod`) multiplied across ranks (`op=ReduceOp.PRODUCT`).

`--bug`: the scaler's statistics are not all-reduced (each rank scales by its own rows'
minimum and maximum).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

BUG = "--bug" in sys.argv
N = 8


class SyncMinMaxScaler(nn.Module):
    def __init__(self, group=None):
        super().__init__()
        self.group = group

    def forward(self, x):
        with torch.no_grad():
            lo = x.amin(dim=0)
            hi = x.amax(dim=0)
            if not BUG:
                dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=self.group)
                dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=self.group)
        return (x - lo) / (hi - lo)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(SyncMinMaxScaler(), nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1), nn.Sigmoid())
    for name, p in model.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    x = cap.replicate(torch.randn(N, 4, generator=g), name="x")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        rows = N // ws
        lik = model(x[rank * rows:(rank + 1) * rows]).squeeze(1)
        loss = -torch.log(lik).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        opt.step()
        with torch.no_grad():
            joint = torch.prod(lik)
            dist.all_reduce(joint, op=dist.ReduceOp.PRODUCT)
    cap.output("joint_likelihood", joint, "R")
    for name, p in model.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
