"""Gradient tricks of DDP training loops as people write them (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

Gradient accumulation over 2 micro-batches with `loss / accum_steps`, the first under
`model.no_sync()` (DDP all-reduces only on the last), then `--clip` picks one:
  value  torch.nn.utils.clip_grad_value_(model.parameters(), 0.05)
  inf    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=float('inf'))
  l1     torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=1)
  l2     torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
then `optimizer.step()`, `optimizer.zero_grad(set_to_none=True)`, and the parameters read back
flat with `torch.nn.utils.parameters_to_vector` (as for an EMA or a checkpoint).

`--bug`: the loss is not divided by accum_steps on rank 1 (the division placed inside an
`if is_main_process:` block), so its accumulated gradient is twice as large.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
CLIP = sys.argv[sys.argv.index("--clip") + 1] if "--clip" in sys.argv else "value"
ACCUM, BATCH, D_IN, HIDDEN, OUT = 2, 8, 6, 12, 4


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))
    for name, p in net.named_parameters():
        cap.replicate(p, name="net_" + name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(ACCUM, BATCH, D_IN, generator=g), name="data")
    target = cap.replicate(torch.randn(ACCUM, BATCH, OUT, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        for m in range(ACCUM):
            x, y = data[m].chunk(ws)[rank], target[m].chunk(ws)[rank]
            loss = F.mse_loss(model(x), y)
            if not BUG or rank == 0:
                loss = loss / ACCUM
            if m < ACCUM - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        if CLIP == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.05)
        elif CLIP == "inf":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=float("inf"))
        elif CLIP == "l1":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=1)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        flat = torch.nn.utils.parameters_to_vector(model.parameters())
        reported = loss.detach().clone()  # the logged loss of the last micro-batch, averaged
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    cap.output("params_flat", flat, "R")
