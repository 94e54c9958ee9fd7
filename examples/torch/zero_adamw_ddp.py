"""DDP with `ZeroRedundancyOptimizer` over AdamW, as PyTorch's ZeRO recipe writes it (issue 33),
for `planproof capture --nproc 2 --mesh dp=2`.

A small classifier (`Linear-LayerNorm-GELU-Linear`) wrapped in `DistributedDataParallel`, each
rank its chunk of the batch, `F.cross_entropy`; the optimizer is
`torch.distributed.optim.ZeroRedundancyOptimizer(model.parameters(),
optimizer_class=torch.optim.AdamW, lr=..., weight_decay=...)`: each rank keeps AdamW's state for
its own share of the parameters, steps them, and broadcasts them to the others. Two training
steps, each `zero_grad`, forward, backward, `step`, with rank 0 logging the loss.

`--bug`: `optimizer.zero_grad()` indented into rank 0's logging block, so rank 1 keeps the first
step's gradients and DDP averages them into the second step's.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
STEPS, BATCH, D_IN, HIDDEN, CLASSES = 2, 8, 6, 12, 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D_IN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    optimizer = ZeroRedundancyOptimizer(
        model.parameters(),
        optimizer_class=torch.optim.AdamW,
        lr=1e-2,
        weight_decay=0.01,
    )
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(STEPS, BATCH, D_IN, generator=g), name="data")
    labels = cap.replicate(torch.randint(0, CLASSES, (STEPS, BATCH), generator=g), name="labels", values=(0, CLASSES))
    with cap.trace():
        for i in range(STEPS):
            x, y = data[i].chunk(ws)[rank], labels[i].chunk(ws)[rank]
            if not BUG:
                optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0:
                print("step %d loss %.4f" % (i, loss.item()))
                if BUG:
                    optimizer.zero_grad()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
