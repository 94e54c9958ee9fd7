"""A small DDP model stepped by the optimizers and schedules people configure (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

`--opt` picks one, written as in tutorials and Hugging Face's Trainer:
  nesterov  torch.optim.SGD(momentum=0.9, nesterov=True, weight_decay=1e-4)
  rmsprop   torch.optim.RMSprop(lr=1e-2, alpha=0.9)
  adagrad   torch.optim.Adagrad(lr=0.1)
  amsgrad   torch.optim.Adam(lr=1e-3, amsgrad=True)
  groups    AdamW with the usual two groups: no weight decay on biases and LayerNorm weights,
            and a linear-warmup LambdaLR stepped after optimizer.step()
  onecycle  SGD(momentum=0.9) with OneCycleLR(max_lr=0.1, total_steps=10) (it cycles the
            momentum too), stepped every batch
  warmup_cosine  AdamW with SequentialLR: LinearLR(start_factor=0.1, total_iters=2) warmup,
            then CosineAnnealingLR(T_max=8), as timm / Lightning recipes configure it
Two training steps run in the captured step (`--steps`, default 2), each with zero_grad,
forward, backward and step, as a training loop does.

`--bug`: rank 1 skips `optimizer.zero_grad()` (the call placed under `if rank == 0:` next to
the logging), so its second step adds the first step's gradient.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
OPT = sys.argv[sys.argv.index("--opt") + 1] if "--opt" in sys.argv else "nesterov"
STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 2
BATCH, D_IN, HIDDEN, OUT = 8, 6, 12, 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D_IN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, OUT)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


def make_optimizer(model):
    if OPT == "nesterov":
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4), None
    if OPT == "rmsprop":
        return torch.optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.9), None
    if OPT == "adagrad":
        return torch.optim.Adagrad(model.parameters(), lr=0.1), None
    if OPT == "amsgrad":
        return torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True), None
    if OPT == "groups":
        no_decay = ["bias", "norm.weight"]
        groups = [
            {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
            {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups, lr=1e-3)
        warmup = 4
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
        return opt, sched
    if OPT == "onecycle":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    if OPT == "warmup_cosine":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)
        return opt, torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
    raise SystemExit("unknown --opt " + OPT)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Net()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(STEPS, BATCH, D_IN, generator=g), name="data")
    target = cap.replicate(torch.randn(STEPS, BATCH, OUT, generator=g), name="target")
    opt, sched = make_optimizer(model)
    with cap.trace():
        for s in range(STEPS):
            x, y = data[s].chunk(ws)[rank], target[s].chunk(ws)[rank]
            if not BUG or rank == 0:
                opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
