"""Mixed precision on CPU under DDP: the forward in `torch.autocast(device_type="cpu",
dtype=torch.bfloat16)`, as PyTorch's AMP recipe writes it (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

A small MLP classifier (`Linear-GELU-Linear`) wrapped in `DistributedDataParallel`, each rank
its chunk of the batch; the forward and the loss under autocast (`F.linear` runs in bfloat16
there, `F.cross_entropy` in float32), backward and step outside it; SGD with momentum, as the
recipe's training loop. The logged loss is
all-reduced and divided by the world size.

`--bug`: the logged loss all-reduced but not divided by the world size (a sum, not the mean).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
BATCH, D_IN, HIDDEN, CLASSES = 8, 6, 16, 3


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, CLASSES))
    for name, p in net.named_parameters():
        cap.replicate(p, name="net_" + name.replace(".", "_"), role="param")
    model = DDP(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, D_IN, generator=g), name="data")
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES))
    with cap.trace():
        x, y = data.chunk(ws)[rank], labels.chunk(ws)[rank]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            output = model(x)
            loss = F.cross_entropy(output, y)
        loss.backward()
        optimizer.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        if not BUG:
            reported /= ws
    cap.output("loss", reported, "R")
    for name, p in net.named_parameters():
        cap.output("net_" + name.replace(".", "_") + "_new", p, "R")
