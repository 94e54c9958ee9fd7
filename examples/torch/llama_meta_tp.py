"""Meta's Llama (llama/model.py, torchtitan's llama) under tensor parallelism, written as that
code is written, for `planproof capture --nproc 2 -- llama_meta_tp.py`.

Rotary embedding with complex numbers (`precompute_freqs_cis` with `torch.outer` and
`torch.polar`, a buffer made at construction; `torch.view_as_complex` of the heads' pairs, a
complex product, `torch.view_as_real(...).flatten(3)`, `.type_as(xq)`); grouped-query attention
(`n_kv_heads < n_heads`, `repeat_kv` by `x[:, :, :, None, :].expand(...).reshape(...)`); RMSNorm
with `torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` then `.type_as(x)`; the causal mask
`torch.full((s, s), float("-inf"))` then `torch.triu(mask, diagonal=1)`, added to the scores;
SwiGLU `w2(F.silu(w1(x)) * w3(x))`; fairscale's Column/RowParallelLinear written out with
its mappings (`copy_to_model_parallel_region`: identity forward, all-reduce backward;
`reduce_from_model_parallel_region`: all-reduce forward, identity backward); F.cross_entropy;
torch.optim.AdamW. Heads (query and key/value) and the FFN are split over the tensor-parallel
group; embedding, final norm and output head are replicated.

`--bug`: the FFN's row-parallel w2 does not all-reduce its output (each rank adds only its
partial sum to the residual).
`--bug-grad`: `copy_to_model_parallel_region` written as a plain identity (its backward does not
all-reduce the input gradient, so the norms and the embedding see one rank's part).
"""
import math
import sys
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_GRAD = "--bug-grad" in sys.argv


@dataclass
class ModelArgs:
    dim: int = 16
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: Optional[int] = 2
    vocab_size: int = 32
    multiple_of: int = 8
    ffn_dim_multiplier: Optional[float] = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 8


# ---- fairscale.nn.model_parallel, as its mappings.py and layers.py write it

_MODEL_PARALLEL_GROUP = None


def get_model_parallel_group():
    return _MODEL_PARALLEL_GROUP


def get_model_parallel_world_size():
    return dist.get_world_size(group=get_model_parallel_group())


def get_model_parallel_rank():
    return dist.get_rank(group=get_model_parallel_group())


def _reduce(input_):
    group = get_model_parallel_group()
    if dist.get_world_size(group=group) == 1:
        return input_
    dist.all_reduce(input_, group=group)
    return input_


class _CopyToModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return input_

    @staticmethod
    def backward(ctx, grad_output):
        if BUG_GRAD:
            return grad_output
        return _reduce(grad_output)


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_):
        return _reduce(input_)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def copy_to_model_parallel_region(input_):
    return _CopyToModelParallelRegion.apply(input_)


def reduce_from_model_parallel_region(input_):
    return _ReduceFromModelParallelRegion.apply(input_)


class ColumnParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=False, gather_output=False):
        super().__init__()
        self.output_size_per_partition = out_features // get_model_parallel_world_size()
        self.weight = nn.Parameter(torch.empty(self.output_size_per_partition, in_features))
        nn.init.normal_(self.weight, std=0.3)

    def forward(self, input_):
        input_parallel = copy_to_model_parallel_region(input_)
        return F.linear(input_parallel, self.weight)


class RowParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=False, input_is_parallel=True, reduce=True):
        super().__init__()
        self.input_size_per_partition = in_features // get_model_parallel_world_size()
        self.weight = nn.Parameter(torch.empty(out_features, self.input_size_per_partition))
        nn.init.normal_(self.weight, std=0.3)
        self.reduce = reduce

    def forward(self, input_):
        output_parallel = F.linear(input_, self.weight)
        if not self.reduce:
            return output_parallel
        return reduce_from_model_parallel_region(output_parallel)


# ---- llama/model.py

class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        model_parallel_size = get_model_parallel_world_size()
        self.n_local_heads = args.n_heads // model_parallel_size
        self.n_local_kv_heads = self.n_kv_heads // model_parallel_size
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.dim // args.n_heads

        self.wq = ColumnParallelLinear(args.dim, args.n_heads * self.head_dim, bias=False, gather_output=False)
        self.wk = ColumnParallelLinear(args.dim, self.n_kv_heads * self.head_dim, bias=False, gather_output=False)
        self.wv = ColumnParallelLinear(args.dim, self.n_kv_heads * self.head_dim, bias=False, gather_output=False)
        self.wo = RowParallelLinear(args.n_heads * self.head_dim, args.dim, bias=False, input_is_parallel=True)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

        # repeat k/v heads if n_kv_heads < n_heads
        keys = repeat_kv(xk, self.n_rep)  # (bs, seqlen, n_local_heads, head_dim)
        values = repeat_kv(xv, self.n_rep)

        xq = xq.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        keys = keys.transpose(1, 2)
        values = values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # (bs, n_local_heads, seqlen, seqlen)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (bs, n_local_heads, seqlen, head_dim)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int, ffn_dim_multiplier: Optional[float]):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        # custom dim factor multiplier
        if ffn_dim_multiplier is not None:
            hidden_dim = int(ffn_dim_multiplier * hidden_dim)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)

        self.w1 = ColumnParallelLinear(dim, hidden_dim, bias=False, gather_output=False)
        self.w2 = RowParallelLinear(hidden_dim, dim, bias=False, input_is_parallel=True, reduce=not BUG)
        self.w3 = ColumnParallelLinear(dim, hidden_dim, bias=False, gather_output=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(dim=args.dim, hidden_dim=4 * args.dim, multiple_of=args.multiple_of, ffn_dim_multiplier=args.ffn_dim_multiplier)
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: Optional[torch.Tensor]):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = torch.nn.ModuleList()
        for layer_id in range(params.n_layers):
            self.layers.append(TransformerBlock(layer_id, params))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.freqs_cis = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2, params.rope_theta)

    def forward(self, tokens: torch.Tensor):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        self.freqs_cis = self.freqs_cis.to(h.device)
        freqs_cis = self.freqs_cis[0:seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
        for layer in self.layers:
            h = layer(h, freqs_cis, mask)
        h = self.norm(h)
        output = self.output(h).float()
        return output


# ---- the training step

BATCH, SEQ = 2, 8
COLUMN = ("wq", "wk", "wv", "w1", "w3")


def step(cap):
    global _MODEL_PARALLEL_GROUP
    ws, rank = dist.get_world_size(), dist.get_rank()
    if _MODEL_PARALLEL_GROUP is None:
        _MODEL_PARALLEL_GROUP = dist.new_group(list(range(ws)))
    args = ModelArgs()
    torch.manual_seed(0)
    model = Transformer(args)
    # This rank's shards of the full checkpoint, as a model-parallel checkpoint is split
    # (consolidated.0{rank}.pth): column-parallel weights by rows, row-parallel by columns.
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = torch.randn(*_full_shape(name, p, ws), generator=g) * 0.3 if p.dim() == 2 else torch.ones_like(p)
            kind = name.split(".")[-2]
            if kind in COLUMN:
                p.copy_(full.chunk(ws, 0)[rank])
            elif kind in ("wo", "w2"):
                p.copy_(full.chunk(ws, 1)[rank])
            else:
                p.copy_(full)
    for name, p in model.named_parameters():
        kind = name.split(".")[-2]
        pname = "p_" + name.replace(".", "_")
        if kind in COLUMN:
            cap.shard(p, 0, "tp", name=pname, role="param")
        elif kind in ("wo", "w2"):
            cap.shard(p, 1, "tp", name=pname, role="param")
        else:
            cap.replicate(p, name=pname, role="param")
    data = torch.randint(0, args.vocab_size, (BATCH, SEQ + 1), generator=g)
    tokens = cap.replicate(data[:, :-1].contiguous(), name="tokens", values=(0, args.vocab_size))
    targets = cap.replicate(data[:, 1:].contiguous(), name="targets", values=(0, args.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    with cap.trace():
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, args.vocab_size), targets.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    cap.output("loss", loss, "R")
    for name, p in model.named_parameters():
        kind = name.split(".")[-2]
        placement = "S(0)" if kind in COLUMN else "S(1)" if kind in ("wo", "w2") else "R"
        cap.output("p_" + name.replace(".", "_") + "_new", p, placement)


def _full_shape(name, p, ws):
    kind = name.split(".")[-2]
    if kind in COLUMN:
        return (p.shape[0] * ws, p.shape[1])
    if kind in ("wo", "w2"):
        return (p.shape[0], p.shape[1] * ws)
    return tuple(p.shape)
