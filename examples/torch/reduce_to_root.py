"""Gradients reduced to rank 0, which steps and broadcasts the parameters (a parameter-server
style data-parallel step, issue 33), for `planproof capture --nproc 2 --axis dp`.

Each rank runs its rows; `dist.reduce(p.grad, dst=0)` sums the gradients on rank 0, which
averages them and takes the SGD step; `dist.broadcast(p.data, src=0)` sends the new
parameters to every rank; the loss is reduced to rank 0 for logging. After `dist.reduce` only
dst's tensor is specified (torch's documentation; gloo leaves partial sums on the others): the
capture makes the others' value a free input of the plan, so a program whose results depend on
it is refuted.

`--bug`: every rank steps with the gradient dist.reduce left it, and nothing is broadcast
(dist.reduce taken for dist.all_reduce).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    for name, p in model.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    x = cap.replicate(torch.randn(8, 6, generator=g), name="x")
    y = cap.replicate(torch.randn(8, 3, generator=g), name="y")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        rows = x.shape[0] // ws
        loss = F.mse_loss(model(x[rank * rows:(rank + 1) * rows]), y[rank * rows:(rank + 1) * rows])
        loss.backward()
        for p in model.parameters():
            dist.reduce(p.grad, dst=0)
        if BUG:
            for p in model.parameters():
                p.grad /= ws
            opt.step()
        else:
            if rank == 0:
                for p in model.parameters():
                    p.grad /= ws
                opt.step()
            for p in model.parameters():
                dist.broadcast(p.data, src=0)
        total = loss.detach().clone()
        dist.reduce(total, dst=0)
        if rank == 0:
            total /= ws
    if rank == 0:
        cap.output("loss", total, "R")
    for name, p in model.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
