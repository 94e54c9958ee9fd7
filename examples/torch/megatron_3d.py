"""Megatron-style data x pipeline x tensor parallelism with tied embeddings (issue 33), for
`planproof capture --mesh pp=2,dp=2,tp=2` (8 processes) or `--mesh pp=2,tp=2` (tp x pp).

Process groups are made as Megatron's `initialize_model_parallel` makes them (tensor-parallel
ranks consecutive, data-parallel ranks `tp` apart within a pipeline stage, pipeline ranks
`world / pp` apart; the embedding group the first and last rank of each pipeline group).
Two pipeline stages: the first looks the token ids up in the word embedding and runs a
column- then row-parallel MLP (Megatron's `copy_to` / `reduce_from` autograd Functions in
the TP group), and sends its activations to the next stage with `dist.send`; the last
stage receives them, runs its own TP MLP and the output layer with the word embedding (a
copy of it, as Megatron keeps on the last stage: weights tied, its gradient all-reduced over
the embedding group), cross-entropy, and sends the activation gradient back. Gradients are
all-reduced over the data-parallel group and averaged, the embedding's then summed over the
embedding group; SGD. Every input is declared on the stage that holds it.

`--bug`: the embedding's gradient is not all-reduced over the embedding group (each stage
updates its copy with its own part of the gradient).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

BUG = "--bug" in sys.argv
TP, PP = 2, 2
VOCAB, HIDDEN, FFN, TOKENS = 16, 8, 16, 8


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


_GROUPS = {}


def initialize_model_parallel(tp, pp):
    world, rank = dist.get_world_size(), dist.get_rank()
    num_tp_groups = world // tp
    num_pp_groups = world // pp
    for i in range(pp):
        start, end = i * num_pp_groups, (i + 1) * num_pp_groups
        for j in range(tp):
            ranks = list(range(start + j, end, tp))
            g = dist.new_group(ranks)
            if rank in ranks:
                _GROUPS["dp"] = g
    for i in range(num_tp_groups):
        ranks = list(range(i * tp, (i + 1) * tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            _GROUPS["tp"] = g
    for i in range(num_pp_groups):
        ranks = list(range(i, world, num_pp_groups))
        g = dist.new_group(ranks)
        if rank in ranks:
            _GROUPS["pp"] = g
            _GROUPS["pp_ranks"] = ranks
        embedding_ranks = [ranks[0], ranks[-1]] if len(ranks) > 1 else ranks
        g = dist.new_group(embedding_ranks)
        if rank in embedding_ranks:
            _GROUPS["embedding"] = g


def mlp(x, w_in, w_out):
    h = F.gelu(F.linear(_CopyToTP.apply(x, _GROUPS["tp"]), w_in))
    return _ReduceFromTP.apply(F.linear(h, w_out), _GROUPS["tp"])


def step(cap):
    world, rank = dist.get_world_size(), dist.get_rank()
    tp, pp = min(TP, world), min(PP, world)
    dp = world // (tp * pp)
    if not _GROUPS:
        initialize_model_parallel(tp, pp)
    tp_rank, dp_rank, pp_rank = rank % tp, (rank // tp) % dp, rank // (tp * dp)
    first, last = pp_rank == 0, pp_rank == pp - 1
    g = torch.Generator().manual_seed(0)
    IDS, LABELS = torch.randint(0, VOCAB, (TOKENS,), generator=g), torch.randint(0, VOCAB, (TOKENS,), generator=g)
    WTE = torch.randn(VOCAB, HIDDEN, generator=g)
    W = [torch.randn(FFN, HIDDEN, generator=g), torch.randn(HIDDEN, FFN, generator=g)] * 2
    W = [w * 0.3 for w in W]
    params = []
    if first:
        ids = cap.replicate(IDS, name="ids", values=(0, VOCAB))
        wte = cap.replicate(WTE.clone().requires_grad_(), name="wte", role="param")
        w1 = cap.shard(W[0].chunk(tp, 0)[tp_rank].clone().requires_grad_(), 0, "tp", name="w1", role="param")
        w2 = cap.shard(W[1].chunk(tp, 1)[tp_rank].clone().requires_grad_(), 1, "tp", name="w2", role="param")
        params += [wte, w1, w2]
    if last:
        labels = cap.replicate(LABELS, name="labels", values=(0, VOCAB))
        if not first:
            # The last stage's copy of the word embedding (Megatron initializes it alike).
            wte = cap.replicate(WTE.clone().requires_grad_(), name="wte", role="param")
            params.append(wte)
        w3 = cap.shard(W[2].chunk(tp, 0)[tp_rank].clone().requires_grad_(), 0, "tp", name="w3", role="param")
        w4 = cap.shard(W[3].chunk(tp, 1)[tp_rank].clone().requires_grad_(), 1, "tp", name="w4", role="param")
        params += [w3, w4]
    pp_ranks = _GROUPS["pp_ranks"]
    opt = torch.optim.SGD(params, lr=0.1)
    n = TOKENS // dp
    with cap.trace():
        if first:
            x = F.embedding(ids[dp_rank * n:(dp_rank + 1) * n], wte)
            h = x + mlp(x, w1, w2)
            if not last:
                dist.send(h.detach(), pp_ranks[pp_rank + 1])
        if last:
            if not first:
                h_in = torch.empty(n, HIDDEN)
                dist.recv(h_in, pp_ranks[pp_rank - 1])
                h_in.requires_grad_()
                h = h_in
            out = h + mlp(h, w3, w4)
            logits = F.linear(out, wte)
            loss = F.cross_entropy(logits, labels[dp_rank * n:(dp_rank + 1) * n])
            loss.backward()
            if not first:
                dist.send(h_in.grad, pp_ranks[pp_rank - 1])
        if first and not last:
            grad = torch.empty(n, HIDDEN)
            dist.recv(grad, pp_ranks[pp_rank + 1])
            h.backward(grad)
        for p in params:
            dist.all_reduce(p.grad, group=_GROUPS["dp"])
            p.grad /= dp
        if (first or last) and not BUG:
            dist.all_reduce(wte.grad, group=_GROUPS["embedding"])
        opt.step()
        if last:
            reported = loss.detach().clone()
            dist.all_reduce(reported, group=_GROUPS["dp"])
            reported /= dp
    if last:
        cap.output("loss", reported, "R")
        cap.output("w3_new", w3, {"tp": "S(0)"})
        cap.output("w4_new", w4, {"tp": "S(1)"})
    if first:
        cap.output("w1_new", w1, {"tp": "S(0)"})
        cap.output("w2_new", w2, {"tp": "S(1)"})
    cap.output("wte_new", wte, "R")
