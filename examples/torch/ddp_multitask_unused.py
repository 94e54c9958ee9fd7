"""A multi-task model under DDP with `find_unused_parameters=True` (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

Written as multi-task fine-tuning code is usually written: a shared encoder (a stack of
`Linear-LayerNorm-GELU` blocks, `nn.ModuleList`), a classification head and an auxiliary
regression head whose loss is added only when the batch carries regression targets
(`aux_targets is not None`). This step trains on the classification task alone, so the
auxiliary head gets no gradient, which is why the model is wrapped with
`DistributedDataParallel(..., find_unused_parameters=True)` (without it torch raises at the
next iteration). DDP is also given small buckets (`bucket_cap_mb=0.001`, several all-reduces)
and `gradient_as_bucket_view=True`, as memory-tuning guides suggest. Two micro-batches of
gradient accumulation, all but the last under `model.no_sync()` (the loop's
`(micro + 1) % accum_steps != 0` test), the loss divided by `accum_steps`; SGD with momentum.

`--bug`: the accumulation test off by one, `micro % accum_steps != 0`: the first micro-batch
synchronizes and the last does not, so the last micro-batch's gradients are each rank's own.
"""
import contextlib
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
D_IN, D, LAYERS, CLASSES, BATCH = 6, 16, 3, 4, 8
accum_steps = 2


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return x + F.gelu(self.norm(self.fc(x)))


class MultiTaskModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(D_IN, D)
        self.blocks = nn.ModuleList([Block(D) for _ in range(LAYERS)])
        self.cls_head = nn.Linear(D, CLASSES)
        self.aux_head = nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, 1))

    def forward(self, x, labels=None, aux_targets=None):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        logits = self.cls_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits, labels)
        if aux_targets is not None:
            aux = self.aux_head(h).squeeze(-1)
            loss = loss + 0.5 * F.mse_loss(aux, aux_targets)
        return loss, logits


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = MultiTaskModel()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net, find_unused_parameters=True, bucket_cap_mb=0.001, gradient_as_bucket_view=True)
    g = torch.Generator().manual_seed(1)
    features = cap.replicate(torch.randn(BATCH, D_IN, generator=g), name="features")
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with cap.trace():
        # DistributedSampler's split: rank r takes samples r, r + world, ...
        x, y = features[rank::ws], labels[rank::ws]
        optimizer.zero_grad()
        for micro, (xb, yb) in enumerate(zip(x.chunk(accum_steps), y.chunk(accum_steps))):
            no_sync = (micro % accum_steps != 0) if BUG else ((micro + 1) % accum_steps != 0)
            with model.no_sync() if no_sync else contextlib.nullcontext():
                loss, _ = model(xb, labels=yb)
                (loss / accum_steps).backward()
        optimizer.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
