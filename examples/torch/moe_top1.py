"""A top-1 mixture-of-experts layer under data parallelism (issue 33), for
`planproof capture --nproc 2 --axis dp [--router topk|argmax]`.

Written the way Switch-Transformer style layers are: a router linear, softmax over experts,
the top-1 expert and its probability (`probs.max(dim=-1)` by default; `torch.topk(probs, 1)` or
`probs.argmax(-1)` with `--router`), each expert applied to the tokens routed to it through a
0/1 mask, the outputs scaled by the router probability. Each rank takes its tokens; gradients
are all-reduced and averaged by hand; SGD.

`--bug`: the router's weight gradient is not all-reduced (each rank steps with its own tokens'
gradient), as in Megatron's switch-MLP bug.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
ROUTER = sys.argv[sys.argv.index("--router") + 1] if "--router" in sys.argv else "max"
E, H, F_ = 3, 4, 6


class Top1MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(H, E, bias=False)
        self.w1 = nn.ModuleList(nn.Linear(H, F_) for _ in range(E))
        self.w2 = nn.ModuleList(nn.Linear(F_, H) for _ in range(E))

    def forward(self, x):
        probs = F.softmax(self.router(x), dim=-1)
        if ROUTER == "topk":
            top_p, top_i = torch.topk(probs, 1, dim=-1)
            top_p, top_i = top_p.squeeze(-1), top_i.squeeze(-1)
        elif ROUTER == "argmax":
            top_i = probs.argmax(dim=-1)
            top_p = probs.gather(-1, top_i.unsqueeze(-1)).squeeze(-1)
        else:
            top_p, top_i = probs.max(dim=-1)
        out = torch.zeros_like(x)
        for e in range(E):
            mask = (top_i == e).unsqueeze(-1).to(x.dtype)
            out = out + mask * self.w2[e](F.gelu(self.w1[e](x)))
        return out * top_p.unsqueeze(-1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = Top1MoE()
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randn(32, H, generator=g), name="data")
    target = cap.replicate(torch.randn(32, H, generator=g), name="target")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        n = data.shape[0] // ws
        x, y = data[rank * n:(rank + 1) * n], target[rank * n:(rank + 1) * n]
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for name, p in model.named_parameters():
            if BUG and name.startswith("router"):
                continue
            dist.all_reduce(p.grad)
            p.grad /= ws
        opt.step()
    cap.output("router_new", model.router.weight, "R")
    cap.output("w1_0_new", model.w1[0].weight, "R")
    cap.output("w2_2_new", model.w2[2].weight, "R")
