"""Multi-task training on mixed batches under DDP (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

Written the way multi-task fine-tuning code is usually written: each sample carries an integer
task id (`batch["task"]`, 0 = classification, 1 = regression), a shared trunk feeds a
classification head and a regression head, and each task's loss is masked by `task == k`. The
regression loss is added only `if reg_mask.any():` (skip the head when the batch has no
regression sample), and the number of regression samples is logged with `.item()`. This batch
holds its regression samples in its first half, so rank 1's shard has none: rank 1 skips the
regression head, and DDP(find_unused_parameters=True) averages its gradient with zeros.
Correct: each masked loss summed and divided by the rank's batch size (DDP's average then
gives the single device's mean over the global batch). SGD with momentum.

`--bug`: the regression loss divided by the rank's count of regression samples
(`reg_mask.sum()`), the per-task mean a single device would compute over the whole batch:
rank 0's mean averaged with rank 1's zeros is half the single device's.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
D_IN, D, CLASSES, BATCH = 5, 8, 3, 8


class MultiTaskNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(D_IN, D), nn.ReLU(), nn.Linear(D, D), nn.Tanh())
        self.cls_head = nn.Linear(D, CLASSES)
        self.reg_head = nn.Linear(D, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls_head(h), self.reg_head(h).squeeze(-1)


def compute_loss(model, batch):
    logits, reg_out = model(batch["x"])
    task = batch["task"]
    cls_mask = (task == 0).float()
    reg_mask = task == 1
    ce = F.cross_entropy(logits, batch["label"], reduction="none")
    loss = (ce * cls_mask).sum() / task.shape[0]
    n_reg = reg_mask.sum().item()
    if reg_mask.any():
        se = F.mse_loss(reg_out, batch["target"], reduction="none") * reg_mask.float()
        loss = loss + se.sum() / (reg_mask.sum() if BUG else task.shape[0])
    return loss, n_reg


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = MultiTaskNet()
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(3)
    data = {
        "x": cap.replicate(torch.randn(BATCH, D_IN, generator=g), name="x"),
        "task": cap.replicate(torch.tensor([1, 0, 1, 0, 0, 0, 0, 0]), name="task", values=(0, 2)),
        "label": cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="label", values=(0, CLASSES)),
        "target": cap.replicate(torch.randn(BATCH, generator=g), name="target"),
    }
    with cap.trace():
        ddp = DDP(model, find_unused_parameters=True)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        per_rank = BATCH // ws
        batch = {k: v[rank * per_rank:(rank + 1) * per_rank] for k, v in data.items()}
        opt.zero_grad()
        loss, n_reg = compute_loss(ddp, batch)
        loss.backward()
        opt.step()
    if rank == 0:
        print("loss %.4f, %d regression samples on rank 0" % (loss.item(), n_reg))
    for name, p in model.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
