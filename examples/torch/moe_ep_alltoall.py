"""An expert-parallel top-1 (or top-2) MoE layer as DeepSpeed / Megatron write it (issue 33), for
`planproof capture --nproc 2 --axis ep --values`.

Each rank takes its tokens (data parallel) and holds E / world experts. The router (a linear,
softmax, `torch.topk(probs, 1)`) picks an expert per token; tokens are sorted by expert with
`torch.argsort(..., stable=True)` (Megatron's permute), per-expert counts come from
`torch.bincount`, and the counts are exchanged with `dist.all_to_all_single`. The split sizes
are read into Python with `.tolist()` and the tokens exchanged with an uneven
`dist.all_to_all_single(recv, send, output_split_sizes=..., input_split_sizes=...)` wrapped in
an autograd Function whose backward is the reverse exchange (DeepSpeed's `_AllToAll`). Each
rank applies its local experts (Linear, GELU, Linear) to the tokens received for each, sends
the results back, un-permutes with `index_copy`, scales by the gate probability; MSE loss,
backward, the router's gradient all-reduced over the ranks and averaged, the experts'
gradients averaged (each expert saw every rank's tokens), SGD.

`--bug`: the un-permute gathers with the permutation (`back[perm]`) where it must scatter
(`index_copy(0, perm, back)`, the inverse permutation): results go to the wrong tokens.
`--bug-router`: the router's gradient is not all-reduced.
`--top 2`: top-2 routing (each token's two experts, slots `perm // 2` as Megatron's permute takes them).
`--counts onehot|histc`: the counts as `F.one_hot(top_i, E).sum(0)` or `torch.histc` instead.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_ROUTER = "--bug-router" in sys.argv
K = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 1
COUNTS = sys.argv[sys.argv.index("--counts") + 1] if "--counts" in sys.argv else "bincount"
E, H, F_ = 2, 4, 6
T = int(sys.argv[sys.argv.index("--tokens") + 1]) if "--tokens" in sys.argv else 16


class _AllToAll(torch.autograd.Function):
    """DeepSpeed's _AllToAll: the backward exchanges the gradient with the splits swapped."""

    @staticmethod
    def forward(ctx, group, x, output_splits, input_splits):
        ctx.group, ctx.splits = group, (output_splits, input_splits)
        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_split_sizes=output_splits,
                               input_split_sizes=input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_s, in_s = ctx.splits
        return None, _AllToAll.apply(ctx.group, grad, in_s, out_s), None, None


def expert(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def moe(x, router, w1, b1, w2, b2, group):
    ws = dist.get_world_size(group)
    local = E // ws
    probs = F.softmax(F.linear(x, router), dim=-1)
    top_p, top_i = torch.topk(probs, K, dim=-1)
    top_p, top_i = top_p.view(-1), top_i.view(-1)
    # Slot s (token s // K, its choice s % K) sorted by expert, in token order (Megatron's permute).
    perm = torch.argsort(top_i, stable=True)
    if COUNTS == "onehot":
        counts = F.one_hot(top_i, num_classes=E).sum(0)
    elif COUNTS == "histc":
        counts = torch.histc(top_i.float(), bins=E, min=0, max=E - 1).long()
    else:
        counts = torch.bincount(top_i, minlength=E)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    input_splits = counts.view(ws, local).sum(1).tolist()
    output_splits = recv_counts.view(ws, local).sum(1).tolist()
    recv = _AllToAll.apply(group, x[perm // K], output_splits, input_splits)
    # Received rows are ordered (source rank, local expert): each expert's rows from every rank.
    chunks = list(recv.split(recv_counts.tolist()))
    outs = [None] * len(chunks)
    for e in range(local):
        mine = [s * local + e for s in range(ws)]
        y = expert(torch.cat([chunks[i] for i in mine]), w1[e], b1[e], w2[e], b2[e])
        for i, piece in zip(mine, y.split([chunks[i].shape[0] for i in mine])):
            outs[i] = piece
    back = _AllToAll.apply(group, torch.cat(outs), input_splits, output_splits)
    # Un-permute: row i of `back` belongs to token perm[i].
    y = back[perm] if BUG else torch.zeros_like(back).index_copy(0, perm, back)
    # Each token's K expert outputs, weighted by their gate probabilities, summed.
    return (y * top_p.unsqueeze(-1)).view(-1, K, y.shape[-1]).sum(1)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    router = cap.replicate(torch.randn(E, H, generator=g).requires_grad_(), name="router", role="param")
    local = E // ws

    def experts(name, *shape):
        full = torch.randn(E, *shape, generator=g) * 0.5
        return cap.shard(full[rank * local:(rank + 1) * local].clone().requires_grad_(), 0, "ep", name=name, role="param")
    w1, b1, w2, b2 = experts("w1", F_, H), experts("b1", F_), experts("w2", H, F_), experts("b2", H)
    data = cap.replicate(torch.randn(T, H, generator=g), name="data")
    target = cap.replicate(torch.randn(T, H, generator=g), name="target")
    group = dist.new_group(list(range(ws)))
    params = [router, w1, b1, w2, b2]
    opt = torch.optim.SGD(params, lr=0.1)
    with cap.trace():
        n = T // ws
        x, y = data[rank * n:(rank + 1) * n], target[rank * n:(rank + 1) * n]
        loss = F.mse_loss(moe(x, router, w1, b1, w2, b2, group), y)
        loss.backward()
        if not BUG_ROUTER:
            dist.all_reduce(router.grad, group=group)
        for p in params:
            p.grad /= ws
        opt.step()
    cap.output("router_new", router, "R")
    cap.output("w1_new", w1, "S(0)")
    cap.output("b2_new", b2, "S(0)")
