"""Expert-parallel-style token exchange with `dist.all_to_all` (issue 33), for
`planproof capture --nproc 2 --axis ep`.

Each rank takes its rows, sends chunk j to rank j (`dist.all_to_all`, emulated on gloo, which
has none under torch 1.13), applies its expert (here a scale and shift), sends the results back
with a second all-to-all, and the rows are all-gathered.

`--bug`: the received chunks are processed in reverse order, so results go back to the wrong
rank.
"""
import sys

import torch
import torch.distributed as dist

BUG = "--bug" in sys.argv


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)
    x = cap.replicate(torch.randn(8, 4, generator=g), name="x")
    with cap.trace():
        n = x.shape[0] // ws
        tokens = x[rank * n:(rank + 1) * n] * 2
        send = list(tokens.chunk(ws))
        recv = [torch.empty_like(s) for s in send]
        dist.all_to_all(recv, send)
        if BUG:
            recv = recv[::-1]
        back = [torch.empty_like(r) for r in recv]
        dist.all_to_all(back, [r + 1 for r in recv])
        out = torch.cat(back)
        rows = [torch.empty_like(out) for _ in range(ws)]
        dist.all_gather(rows, out)
        y = torch.cat(rows)
    cap.output("y", y, "R")
