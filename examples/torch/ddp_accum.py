"""Data parallel with gradient accumulation over micro-batches (issue 33), for
`planproof capture --nproc 2 --axis dp [--reference examples/torch/single_reference.py]`.

Each rank takes its rows, runs MICRO micro-batches and accumulates their gradients, then all-
reduces and averages them; SGD. The single-device training this replaces is
examples/torch/single_reference.py (one full-batch step).

`--bug`: each micro-batch's loss is not divided by the number of micro-batches. The same script
at world size 1 has the same bug, so a capture against it verifies; against the user's own
single-device script (`--reference`) it is refuted.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
MICRO = 2


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    cap.replicate(model.weight, name="weight", role="param")
    cap.replicate(model.bias, name="bias", role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(8, 6, generator=g), name="data")
    target = cap.replicate(torch.randn(8, 4, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        n = data.shape[0] // ws
        x, y = data[rank * n:(rank + 1) * n], target[rank * n:(rank + 1) * n]
        for xb, yb in zip(x.chunk(MICRO), y.chunk(MICRO)):
            loss = F.mse_loss(model(xb), yb)
            if not BUG:
                loss = loss / MICRO
            loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= ws
        opt.step()
    cap.output("weight_new", model.weight, "R")
    cap.output("bias_new", model.bias, "R")
