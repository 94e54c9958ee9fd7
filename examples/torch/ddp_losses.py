"""A small DDP model trained with the losses people use besides cross-entropy (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

`--loss` picks one, written as in tutorials and Hugging Face heads:
  mse       F.mse_loss(pred, y)                                   (regression)
  mse_sum   F.mse_loss(pred, y, reduction='sum') / len(x)         (summed, divided by the local batch)
  huber     F.huber_loss(pred, y, delta=0.5)
  smoothl1  nn.SmoothL1Loss(beta=0.5)(pred, y)
  bce       F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight) (multi-label)
  kl        F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction='batchmean') * T * T
            (distillation from a frozen teacher)
  nll_w     F.cross_entropy(logits, y, weight=class_weight, reduction='sum') over the class
            weight of the labels of every rank (all-reduced), as the single-device mean
            normalizes; labels padded with -100 (ignored), as Hugging Face pads them
  nll_w_mean F.nll_loss(F.log_softmax(logits, 1), y, weight=class_weight): each rank's mean
            over its own rows' weight, so DDP's average is not the single-device loss
            (NOT EQUIVALENT: the common mistake, not a twin that should verify)
  cosine    nn.CosineEmbeddingLoss()(a, b, sign) and 1 - F.cosine_similarity(a, b).mean()
The model is `nn.Sequential(Linear, ReLU, Linear)` wrapped in DistributedDataParallel; each rank
takes `x.chunk(world)[rank]`; `torch.optim.SGD(lr=0.1)`.

`--bug`: the targets are taken as `y[rank::world]` (a DistributedSampler-style stride) while the
inputs are chunked, so each rank trains on mismatched pairs (with `--loss kl` the teacher sees
the strided rows). The logged loss is all-reduced and divided by the world size, as training
scripts print it.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
LOSS = sys.argv[sys.argv.index("--loss") + 1] if "--loss" in sys.argv else "mse"
BATCH, D_IN, HIDDEN, OUT = 8, 6, 12, 4


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))
    teacher = nn.Linear(D_IN, OUT)
    for p in teacher.parameters():
        p.requires_grad_(False)
    for name, p in net.named_parameters():
        cap.replicate(p, name="net_" + name.replace(".", "_"), role="param")
    for name, p in teacher.named_parameters():
        cap.replicate(p, name="teacher_" + name)
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, D_IN, generator=g), name="data")
    if LOSS == "bce":
        target = cap.replicate(torch.randint(0, 2, (BATCH, OUT), generator=g).float(), name="target", values=(0, 2))
        pos_weight = torch.tensor([1.0, 2.0, 0.5, 3.0])
    elif LOSS in ("nll_w", "nll_w_mean"):
        labels = torch.randint(0, OUT, (BATCH,), generator=g)
        labels[[1, 6]] = -100  # padding
        target = cap.replicate(labels, name="target", values={"range": (0, OUT), "also": (-100,)})
        class_weight = torch.tensor([1.0, 0.5, 2.0, 1.5])
    elif LOSS == "cosine":
        target = cap.replicate(torch.randn(BATCH, OUT, generator=g), name="target")
        sign = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0])
    else:
        target = cap.replicate(torch.randn(BATCH, OUT, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        x = data.chunk(ws)[rank]
        y = target[rank::ws] if BUG else target.chunk(ws)[rank]
        opt.zero_grad()
        out = model(x)
        if LOSS == "mse":
            loss = F.mse_loss(out, y)
        elif LOSS == "mse_sum":
            loss = F.mse_loss(out, y, reduction="sum") / x.shape[0]
        elif LOSS == "huber":
            loss = F.huber_loss(out, y, delta=0.5)
        elif LOSS == "smoothl1":
            loss = nn.SmoothL1Loss(beta=0.5)(out, y)
        elif LOSS == "bce":
            loss = F.binary_cross_entropy_with_logits(out, y, pos_weight=pos_weight)
        elif LOSS == "kl":
            T = 2.0
            with torch.no_grad():
                t_logits = teacher(x)
            if BUG:
                t_logits = teacher(data[rank::ws])
            loss = F.kl_div(F.log_softmax(out / T, dim=-1), F.softmax(t_logits / T, dim=-1), reduction="batchmean") * T * T
        elif LOSS == "nll_w":
            valid = y != -100
            denom = (class_weight[y.masked_fill(~valid, 0)] * valid).sum()
            dist.all_reduce(denom)
            loss = F.cross_entropy(out, y, weight=class_weight, reduction="sum") * ws / denom
        elif LOSS == "nll_w_mean":
            loss = F.nll_loss(F.log_softmax(out, dim=1), y, weight=class_weight)
        elif LOSS == "cosine":
            s = sign[rank::ws] if BUG else sign.chunk(ws)[rank]
            loss = nn.CosineEmbeddingLoss(margin=0.1)(out, y, s) + (1 - F.cosine_similarity(out, y).mean())
        else:
            raise SystemExit("unknown --loss " + LOSS)
        loss.backward()
        opt.step()
        reported = loss.detach().clone()  # the logged loss, averaged over the ranks
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    for name, p in net.named_parameters():
        cap.output("net_" + name.replace(".", "_") + "_new", p, "R")
