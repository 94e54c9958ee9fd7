"""A GPT block under Megatron's tensor + sequence parallelism with vocab-parallel
cross-entropy (issue 15), for `planproof capture`.

Each rank holds a sequence shard of the residual stream (SP). LayerNorm runs on the shard;
the sequence is all-gathered before the column-parallel projections (q, k, v by heads, and
fc1), and the row-parallel outputs (attention's out-projection, fc2) are reduce-scattered
back to sequence shards: Megatron's gather/scatter regions, written as autograd Functions
whose backward is the other collective. (gloo under torch 1.13 has no reduce_scatter: it is
an all-reduce followed by this rank's chunk, the same values.) The final LayerNorm's output is
gathered and projected onto this rank's vocabulary shard; the loss is Megatron's
vocab-parallel cross-entropy: the sum of exp over the vocabulary and the target's logit are
each all-reduced (targets given one-hot, sharded with the vocabulary). LayerNorm weights are
replicated, and their gradients, partial per sequence shard under SP, are all-reduced.

`--bug`: the LayerNorm gradients are not all-reduced (a known SP pitfall: each rank steps
with its own shard's gradient). `--bug-ce`: the target logit is not all-reduced (each rank
sees only its vocabulary shard's share).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_CE = "--bug-ce" in sys.argv
S, H, NH, V = 4, 8, 2, 8  # tokens, hidden, heads, vocabulary


class GatherSeq(torch.autograd.Function):
    """Sequence shards -> the whole sequence; backward: reduce-scatter of the gradient."""

    @staticmethod
    def forward(ctx, x):
        ws = dist.get_world_size()
        parts = [torch.empty_like(x) for _ in range(ws)]
        dist.all_gather(parts, x)
        return torch.cat(parts, 0)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g)
        return g.chunk(dist.get_world_size(), 0)[dist.get_rank()]


class ScatterSeq(torch.autograd.Function):
    """Partial sums of the whole sequence -> this rank's shard of their total; backward: all-gather."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x.chunk(dist.get_world_size(), 0)[dist.get_rank()]

    @staticmethod
    def backward(ctx, g):
        ws = dist.get_world_size()
        parts = [torch.empty_like(g) for _ in range(ws)]
        dist.all_gather(parts, g.contiguous())
        return torch.cat(parts, 0)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    gen = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=gen) * 0.5
    X = rnd(S, H)
    T = torch.zeros(S, V)
    T[torch.arange(S), torch.tensor([1, 5, 2, 7])] = 1.0
    MASK = torch.triu(torch.full((S, S), -1.0e4), 1)
    Wq, Wk, Wv, Wo = rnd(H, H), rnd(H, H), rnd(H, H), rnd(H, H)
    W1, W2, WV = rnd(2 * H, H), rnd(H, 2 * H), rnd(V, H)
    LN = [(1 + rnd(H), rnd(H)) for _ in range(3)]

    x = cap.shard(X.chunk(ws, 0)[rank].clone(), 0, "tp", name="x")
    onehot = cap.shard(T.chunk(ws, 1)[rank].clone(), 1, "tp", name="targets")
    mask = cap.replicate(MASK.clone(), name="mask")

    def col(w, name):  # column-parallel: output rows split
        return cap.shard(w.chunk(ws, 0)[rank].clone().requires_grad_(), 0, "tp", name=name, role="param")

    def row(w, name):  # row-parallel: input columns split
        return cap.shard(w.chunk(ws, 1)[rank].clone().requires_grad_(), 1, "tp", name=name, role="param")

    wq, wk, wv, w1 = col(Wq, "wq"), col(Wk, "wk"), col(Wv, "wv"), col(W1, "w1")
    wo, w2 = row(Wo, "wo"), row(W2, "w2")
    wvocab = col(WV, "wvocab")
    ln = [(cap.replicate(w.clone().requires_grad_(), name="ln%d_w" % i, role="param"),
           cap.replicate(b.clone().requires_grad_(), name="ln%d_b" % i, role="param")) for i, (w, b) in enumerate(LN)]
    params = [wq, wk, wv, wo, w1, w2, wvocab] + [p for wb in ln for p in wb]
    opt = torch.optim.SGD(params, lr=0.1)
    nh, hd = NH // ws, H // NH
    with cap.trace():
        # Attention (heads split over the ranks).
        h = GatherSeq.apply(F.layer_norm(x, (H,), ln[0][0], ln[0][1]))
        # (.contiguous(): the import maps reshapes of row-major memory only, docs/import.md.)
        q = F.linear(h, wq).view(S, nh, hd).transpose(0, 1).contiguous()
        k = F.linear(h, wk).view(S, nh, hd).transpose(0, 1).contiguous()
        v = F.linear(h, wv).view(S, nh, hd).transpose(0, 1).contiguous()
        p = torch.softmax(q @ k.transpose(1, 2).contiguous() / hd ** 0.5 + mask, -1)
        a = (p @ v).transpose(0, 1).contiguous().view(S, nh * hd)
        x2 = x + ScatterSeq.apply(F.linear(a, wo))
        # MLP.
        h2 = GatherSeq.apply(F.layer_norm(x2, (H,), ln[1][0], ln[1][1]))
        x3 = x2 + ScatterSeq.apply(F.linear(F.gelu(F.linear(h2, w1)), w2))
        # Vocab-parallel cross-entropy.
        logits = F.linear(GatherSeq.apply(F.layer_norm(x3, (H,), ln[2][0], ln[2][1])), wvocab)
        s = logits.exp().sum(-1)
        dist.all_reduce(s)
        target = (logits * onehot).sum(-1)
        if not BUG_CE:
            dist.all_reduce(target)
        loss = (s.log() - target).mean()
        loss.backward()
        if not BUG:
            for wb in ln:
                for t in wb:
                    dist.all_reduce(t.grad)
        opt.step()
    cap.output("loss", loss, "R")
    for name, t, pl in [("wq_new", wq, "S(0)"), ("wo_new", wo, "S(1)"), ("w1_new", w1, "S(0)"), ("w2_new", w2, "S(1)"), ("wvocab_new", wvocab, "S(0)"), ("ln0_w_new", ln[0][0], "R"), ("ln2_b_new", ln[2][1], "R")]:
        cap.output(name, t, pl)
