"""Megatron's VocabParallelEmbedding with integer token ids (issue 33), for
`planproof capture --nproc 2`.

Each rank holds rows [start, end) of the embedding table; ids outside are masked
(`(ids < start) | (ids >= end)`), shifted (`ids - start`), set to 0 with `masked_input[mask] = 0`,
looked up, the masked rows zeroed with `out[mask, :] = 0.0`, and the partial embeddings
all-reduced; MSE loss, SGD on the shard.

`--bug`: the masked rows are not zeroed (each rank adds its row 0 for ids it does not own).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
BUG = "--bug" in sys.argv
V, H = 8, 4
def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    W = torch.randn(V, H, generator=g)
    per = V // ws
    start, end = rank * per, (rank + 1) * per
    weight = cap.shard(W[start:end].clone().requires_grad_(), 0, "tp", name="emb", role="param")
    ids = cap.replicate(torch.randint(0, V, (2, 3), generator=g), name="ids", values=(0, V))
    tgt = cap.replicate(torch.randn(2, 3, H, generator=g), name="tgt")
    opt = torch.optim.SGD([weight], lr=0.1)
    with cap.trace():
        input_mask = (ids < start) | (ids >= end)
        masked_input = ids.clone() - start
        masked_input[input_mask] = 0
        out = F.embedding(masked_input, weight)
        if not BUG:
            out[input_mask, :] = 0.0
        dist.all_reduce(out)
        loss = F.mse_loss(out, tgt)
        loss.backward()
        opt.step()
    cap.output("loss", loss, "R")
    cap.output("emb_new", weight, "S(0)")
