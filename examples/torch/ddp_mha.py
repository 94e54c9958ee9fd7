"""`nn.MultiheadAttention` and `torch.einsum` under torch DDP (issue 33), for
`planproof capture --nproc 2 --axis dp`.

A small sequence classifier as PyTorch's tutorials write one: `nn.MultiheadAttention(...,
batch_first=True)` self-attention with a causal `attn_mask` from
`nn.Transformer.generate_square_subsequent_mask`, a residual and `nn.LayerNorm`, per-token scores
by `torch.einsum("btd,cd->btc", h, self.proj)`, mean over time, `F.cross_entropy`; wrapped in
`DistributedDataParallel`, each rank its `chunk` of the batch; SGD.

`--bug`: each rank's loss is multiplied by the world size "to undo DDP's averaging" (so the
update is world-size times too large).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
EMBED, HEADS, SEQ, CLASSES, BATCH = 8, 2, 4, 3, 4


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)
        self.norm = nn.LayerNorm(EMBED)
        self.proj = nn.Parameter(torch.randn(CLASSES, EMBED) * 0.3)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.size(1))
        a, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False)
        h = self.norm(x + a)
        scores = torch.einsum("btd,cd->btc", h, self.proj)
        return scores.mean(dim=1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Classifier()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(BATCH, SEQ, EMBED, generator=g), name="data")
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        x, y = data.chunk(ws)[rank], labels.chunk(ws)[rank]
        loss = F.cross_entropy(model(x), y)
        if BUG:
            loss = loss * ws
        loss.backward()
        opt.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
