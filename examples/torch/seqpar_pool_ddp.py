"""A document classifier whose long sequences are split across ranks along the sequence, the
pooled sum made with the autograd-aware `torch.distributed.nn.functional.all_reduce` (issue 33),
for `planproof capture --nproc 2 --mesh dp=2`.

Each rank holds a contiguous chunk of every document's tokens (sequence parallelism by hand, as
long-document code splits inputs that do not fit one device): token embeddings plus learned
position embeddings at the rank's own offset, a per-token feed-forward encoder
(`Linear-GELU-Linear` with a residual and `nn.LayerNorm`), then masked mean pooling over the
whole document: the rank's partial sums of the non-padding token states and of the mask are
summed over the ranks, the sums with `torch.distributed.nn.functional.all_reduce` (whose
backward all-reduces the gradient, so each rank's encoder gets the gradient of every rank's
copy of the loss) and the counts with `dist.all_reduce`. A classifier head, `F.cross_entropy`.
The replicated parameters are averaged by DDP, which together with the all-reduce in the
backward gives each rank the gradient of the single-device loss. AdamW.

`--bug`: the sums all-reduced with the in-place `dist.all_reduce`, which autograd does not see:
each rank's encoder then gets only its own share of the gradient, and DDP's average halves it.
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
VOCAB, D, SEQ, BATCH, CLASSES, PAD = 13, 8, 8, 3, 3, 0
LENGTHS = [8, 5, 3]


class ChunkEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = nn.Embedding(SEQ, D)
        self.norm = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.classifier = nn.Linear(D, CLASSES)

    def forward(self, input_ids, offset):
        positions = torch.arange(offset, offset + input_ids.size(1)).unsqueeze(0)
        h = self.tok(input_ids) + self.pos(positions)
        h = h + self.ff(self.norm(h))
        mask = (input_ids != PAD).unsqueeze(-1).type_as(h)
        summed = (h * mask).sum(dim=1)
        count = mask.sum(dim=1)
        if dist.get_world_size() > 1:
            if BUG:
                dist.all_reduce(summed)
            else:
                summed = dist_nn.all_reduce(summed)
            dist.all_reduce(count)
        pooled = summed / count.clamp(min=1.0)
        return self.classifier(pooled)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = ChunkEncoder()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    for i, n in enumerate(LENGTHS):
        ids[i, n:] = PAD
    input_ids = cap.replicate(ids, name="input_ids", values=(0, VOCAB))
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES))
    with cap.trace():
        chunk = SEQ // ws
        local_ids = input_ids[:, rank * chunk:(rank + 1) * chunk]
        logits = model(local_ids, offset=rank * chunk)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    cap.output("loss", loss, "R")
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
