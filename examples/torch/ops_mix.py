"""Many mapped ATen ops in one data-parallel training step (issue 15), for `planproof capture --axis dp`.

Token embedding, LayerNorm with weight and bias, a biased linear (addmm), a softmax within
each token, GELU, a linear to the vocabulary and cross-entropy (log_softmax + nll_loss);
autograd backward; the gradients all-reduced (sum) and divided by the world size; SGD with
the foreach implementation (_foreach_add_). Runs in float64 so that the committed capture's
values (tools/capture/regen-fixtures.sh, --values) check each ATen mapping numerically.
`--bug` divides the gradients by the world size twice.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv
V, D, N = 10, 8, 4


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.set_default_dtype(torch.float64)
    g = torch.Generator().manual_seed(0)
    IDS = torch.randint(0, V, (N,), generator=g)
    LAB = torch.randint(0, V, (N,), generator=g)
    E = torch.randn(V, D, generator=g)
    LW, LB = 1 + 0.1 * torch.randn(D, generator=g), 0.1 * torch.randn(D, generator=g)
    W, B = torch.randn(D, D, generator=g) / 3, torch.randn(D, generator=g) / 3
    O = torch.randn(V, D, generator=g) / 3
    ids = cap.shard(IDS.chunk(ws, 0)[rank].clone(), 0, "dp", name="ids", values=(0, V))
    lab = cap.shard(LAB.chunk(ws, 0)[rank].clone(), 0, "dp", name="labels", values=(0, V))
    params = [cap.replicate(t.clone().requires_grad_(), name=n, role="param") for n, t in [("emb", E), ("ln_w", LW), ("ln_b", LB), ("w", W), ("b", B), ("out", O)]]
    emb, ln_w, ln_b, w, b, out = params
    opt = torch.optim.SGD(params, lr=0.1, foreach=True)
    with cap.trace():
        h = F.embedding(ids, emb)
        h = F.layer_norm(h, (D,), ln_w, ln_b)
        h = F.linear(h, w, b)
        # Per-token attention between two halves of the features (no mixing across the
        # batch, which data parallelism splits): view, bmm, transpose, softmax.
        q = h.view(-1, 2, D // 2)
        a = torch.softmax(torch.bmm(q, q.transpose(1, 2)) / 4, dim=-1)
        h = F.gelu(torch.bmm(a, q).reshape(-1, D))
        logits = F.linear(h, out)
        loss = F.cross_entropy(logits, lab)
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad)
            p.grad.div_(ws)
            if BUG:
                p.grad.div_(ws)
        opt.step()
        # The reported loss: the mean over the global batch (each rank's is over its rows).
        report = loss.detach().clone()
        dist.all_reduce(report)
        report.div_(ws)
    cap.output("loss", report, "R")
    for n, p in zip(["emb", "ln_w", "ln_b", "w", "b", "out"], params):
        cap.output(n + "_new", p, "R")
