"""Heteroscedastic time-series regression under DDP, as uncertainty-aware regression tutorials
write it (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

Each sample is a sequence of increments; the model reads the path `torch.cumsum(x, dim=1)` and
the increments, an MLP with `F.silu`, a mean head and a variance head made positive with
`F.softplus(...) + 1e-3`, trained with `F.gaussian_nll_loss(mu, y, var)`. torch DDP, Adam and a
linear warmup `LambdaLR`, two optimizer steps per capture.

`--bug`: the path summed over the wrong dim, `increments.cumsum(0)` (the batch, as for
time-major data): on one device each sample adds the samples before it in the batch; on each
rank only those before it in the rank's rows, so rank 1's paths differ.
`--bug-sum`: the loss with `reduction="sum"` over each rank's rows, so DDP's average makes
each gradient the single-device one divided by the world size. Under Adam the step changes
only through its eps (Adam divides the scale out), and verify ends UNKNOWN on it (an open gap:
no witness found, the stages past the exact normal form's bound).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
BUG_SUM = "--bug-sum" in sys.argv
BATCH, T, HIDDEN, STEPS, WARMUP = 8, 5, 16, 2, 4


class HeteroMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2 * T, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.mean_head = nn.Linear(HIDDEN, 1)
        self.var_head = nn.Linear(HIDDEN, 1)

    def forward(self, increments):
        path = increments.cumsum(0) if BUG else torch.cumsum(increments, dim=1)
        h = torch.cat([increments, path], dim=-1)
        h = F.silu(self.fc1(h))
        h = F.silu(self.fc2(h))
        mu = self.mean_head(h).squeeze(-1)
        var = F.softplus(self.var_head(h)).squeeze(-1) + 1e-3
        return mu, var


def name_of(n):
    return n.replace(".", "_")


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = HeteroMLP()
    for n, p in net.named_parameters():
        cap.replicate(p, name=name_of(n), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    xs = cap.replicate(torch.randn(STEPS, BATCH, T, generator=g), name="increments")
    ys = cap.replicate(torch.randn(STEPS, BATCH, generator=g), name="targets")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP))
    with cap.trace():
        for s in range(STEPS):
            x, y = xs[s].chunk(ws)[rank], ys[s].chunk(ws)[rank]
            mu, var = model(x)
            loss = F.gaussian_nll_loss(mu, y, var, reduction="sum" if BUG_SUM else "mean")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
    for n, p in net.named_parameters():
        cap.output(name_of(n) + "_new", p, "R")
