"""Rank 0 loads the batch and scatters it; the per-sample losses are gathered back on rank 0
(issue 33), for `planproof capture --nproc 2 --axis dp`.

The batch exists on rank 0 only (declared there); `dist.scatter` gives each rank its rows of
the inputs and of the labels; data-parallel MLP, gradients all-reduced and averaged, SGD;
`dist.gather` collects every rank's per-sample losses on rank 0, which concatenates them (as
an evaluation loop collects them).

`--bug`: the labels are scattered as DistributedSampler splits a dataset (rows `r::world`)
while the inputs are scattered in contiguous chunks: each rank trains on mismatched pairs.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
N = 8


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    for name, p in model.named_parameters():
        cap.replicate(p, name="p_" + name.replace(".", "_"), role="param")
    if rank == 0:
        g = torch.Generator().manual_seed(1)
        x = cap.replicate(torch.randn(N, 6, generator=g), name="x")
        y = cap.replicate(torch.randn(N, 2, generator=g), name="y")
    rows = N // ws
    x_local, y_local = torch.empty(rows, 6), torch.empty(rows, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        if rank == 0:
            x_parts = list(x.chunk(ws))
            y_parts = [y[r::ws] for r in range(ws)] if BUG else list(y.chunk(ws))
        else:
            x_parts = y_parts = None
        dist.scatter(x_local, x_parts, src=0)
        dist.scatter(y_local, y_parts, src=0)
        per_sample = F.mse_loss(model(x_local), y_local, reduction="none").mean(dim=1)
        per_sample.mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= ws
        opt.step()
        gathered = [torch.empty(rows) for _ in range(ws)] if rank == 0 else None
        dist.gather(per_sample.detach(), gathered, dst=0)
        if rank == 0:
            losses = torch.cat(gathered)
    if rank == 0:
        cap.output("losses", losses, "R")
    for name, p in model.named_parameters():
        cap.output("p_" + name.replace(".", "_") + "_new", p, "R")
