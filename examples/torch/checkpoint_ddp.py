"""Activation checkpointing under torch DDP, as people write it: each transformer-style MLP block
wrapped by `torch.utils.checkpoint.checkpoint(block, x)` (its forward recomputed in backward),
for `planproof capture --nproc 2 --axis dp`. The blocks follow an input projection, as they
follow an embedding in a real model: torch 1.13's default (reentrant) checkpoint gives no
gradient to a block whose input does not require grad (the capture then traced no backward
for the blocks, faithfully: PyTorch trains nothing there either).

`--bug`: rank 1 doubles its loss (a rank-dependent loss scale, as a per-rank token-count
normalisation gone wrong gives).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

BUG = "--bug" in sys.argv
DIM, CLASSES, BATCH, MICRO = 8, 4, 8, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(DIM, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(DIM, CLASSES)
        self.gradient_checkpointing = True

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x)
            else:
                x = block(x)
        return self.head(x)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    raw = Net()
    for name, p in raw.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(raw)
    g = torch.Generator().manual_seed(2)
    x = cap.replicate(torch.randn(BATCH, DIM, generator=g), name="x")
    y = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="y", values=(0, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    per = BATCH // ws
    xs, ys = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    with cap.trace():
        loss = F.cross_entropy(model(xs), ys)
        if BUG and rank == 1:
            loss = loss * 2
        loss.backward()
        opt.step()
    for name, p in raw.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
