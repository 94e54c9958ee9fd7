"""A tiny language-model head trained data-parallel with `F.cross_entropy(...,
label_smoothing=0.1)` (issue 33), for `planproof capture --nproc 2 --axis dp`.

Token ids through an `nn.Embedding`, a linear head over the vocabulary, cross-entropy with
label smoothing (torch 1.13 writes it with `masked_select`, `index_put_` and `masked_scatter`
over the ignore-index mask); each rank's rows, gradients all-reduced and averaged; SGD.

`--bug`: the gradients are summed, not averaged.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    emb, head = nn.Embedding(10, 6), nn.Linear(6, 10)
    for name, p in [("emb", emb.weight), ("head_w", head.weight), ("head_b", head.bias)]:
        cap.replicate(p, name=name, role="param")
    g = torch.Generator().manual_seed(1)
    ids = cap.replicate(torch.randint(0, 10, (8,), generator=g), name="ids", values=(0, 10))
    labels = cap.replicate(torch.randint(0, 10, (8,), generator=g), name="labels", values=(0, 10))
    params = list(emb.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    with cap.trace():
        n = ids.shape[0] // ws
        logits = head(emb(ids[rank * n:(rank + 1) * n]))
        loss = F.cross_entropy(logits, labels[rank * n:(rank + 1) * n], label_smoothing=0.1)
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad)
            if not BUG:
                p.grad /= ws
        opt.step()
    cap.output("head_w_new", head.weight, "R")
    cap.output("emb_new", emb.weight, "R")
