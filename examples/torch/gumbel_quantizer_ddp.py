"""A Gumbel-softmax quantizer under DDP (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

Written as wav2vec 2.0's / DALL-E dVAE's quantizers write it: logits over a codebook, soft codes
from `F.gumbel_softmax(logits, tau=tau, hard=False)` (torch draws its Gumbel noise in place,
`-torch.empty_like(logits).exponential_().log()`), the code vectors as `codes @ codebook`, an
output projection, `F.mse_loss` reconstruction; DDP, SGD. The noise is a plan input drawn per
rank, paired by order with the single device's (docs/import.md: samples).

`--bug`: the reconstruction loss summed over the rank's rows (`reduction="sum"`) instead of
averaged: DDP's average of sums is the single device's sum over half the batch, twice its mean.
"""
import sys
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Quantizer(nn.Module):
    def __init__(self, d, k):
        super().__init__()
        self.logits = nn.Linear(d, k)
        self.codebook = nn.Parameter(torch.randn(k, d) * 0.1)
        self.out = nn.Linear(d, d)

    def forward(self, x, tau=1.0):
        codes = F.gumbel_softmax(self.logits(x), tau=tau, hard=False)
        return self.out(codes @ self.codebook)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = Quantizer(6, 4)
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    x = cap.replicate(torch.randn(8, 6), name="x")
    with cap.trace():
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        xb = x.chunk(ws)[rank]
        loss = F.mse_loss(ddp(xb), xb, reduction="sum" if "--bug" in sys.argv else "mean")
        loss.backward()
        opt.step()
    for name, p in model.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
