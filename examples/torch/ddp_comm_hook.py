"""A DDP classifier with a gradient communication hook, as PyTorch's DDP communication-hook
docs write one (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

An MLP classifier wrapped in `DistributedDataParallel`, each rank its chunk of the batch,
`F.cross_entropy`, SGD with momentum. The gradients are averaged by a hook registered with
`model.register_comm_hook(state=None, hook=...)`: the docs' `allreduce` example (the bucket's
flat buffer divided by the group size, then `dist.all_reduce(..., async_op=True)
.get_future().then(lambda fut: fut.value()[0])`). `--hook default` registers torch's own
`default_hooks.allreduce_hook` instead.

`--bug`: the hand-written hook forgets to divide by the world size (DDP applies no averaging of
its own once a hook is registered), so the update is world-size times too large.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
HOOK = sys.argv[sys.argv.index("--hook") + 1] if "--hook" in sys.argv else "mine"
BATCH, D_IN, HIDDEN, CLASSES = 8, 6, 16, 3


def allreduce_hook(process_group, bucket):
    group_to_use = process_group if process_group is not None else dist.group.WORLD
    # Apply the division first to avoid overflow, especially for FP16.
    tensor = bucket.buffer()
    if not BUG:
        tensor.div_(group_to_use.size())
    return (
        dist.all_reduce(tensor, group=group_to_use, async_op=True)
        .get_future()
        .then(lambda fut: fut.value()[0])
    )


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D_IN, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = MLP()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    model.register_comm_hook(state=None, hook=default_hooks.allreduce_hook if HOOK == "default" else allreduce_hook)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, D_IN, generator=g), name="data")
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with cap.trace():
        x, y = data.chunk(ws)[rank], labels.chunk(ws)[rank]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
