"""A Llama decoder block under Megatron tensor parallelism, written as Llama code is written
(issue 33), for `planproof capture`.

RMSNorm with `pow(2).mean(-1)` and `torch.rsqrt`; rotary embedding with `rotate_half` by
slicing; a causal mask built from `torch.arange` comparisons and applied with `masked_fill`;
SwiGLU MLP (column-parallel gate and up projections, row-parallel down projection); attention
heads split across the tensor-parallel group (column-parallel q/k/v, row-parallel o); the
row-parallel outputs all-reduced; SGD. The RoPE tables are buffers computed at construction,
as in Hugging Face's LlamaRotaryEmbedding.

The tensor-parallel regions are Megatron's autograd Functions (`copy_to_...`: identity forward,
all-reduce backward; `reduce_from_...`: all-reduce forward, identity backward).

`--neg-inf`: the causal mask applied as many attention implementations write it,
`scores.masked_fill(mask, float('-inf'))` (the import reads softmax of an -inf fill exactly:
the masked entries get probability 0).

`--bug`: the all-reduce after the attention's row-parallel output projection is missing.
`--bug-grad`: the input gradient of the column-parallel projections is not all-reduced (a
plain `dist.all_reduce` in the forward instead of Megatron's Functions does the same).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
BUG_GRAD = "--bug-grad" in sys.argv
NEG_INF = "--neg-inf" in sys.argv

HIDDEN, HEADS, SEQ, BATCH, FFN = 8, 2, 4, 2, 16
HEAD_DIM = HIDDEN // HEADS


class _CopyToModelParallelRegion(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, input_, group):
        ctx.group = group
        return input_

    @staticmethod
    def backward(ctx, grad_output):
        if not BUG_GRAD:
            dist.all_reduce(grad_output, group=ctx.group)
        return grad_output, None


class _ReduceFromModelParallelRegion(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, input_, group):
        dist.all_reduce(input_, group=group)
        return input_

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


def copy_to_tensor_model_parallel_region(x, group):
    return _CopyToModelParallelRegion.apply(x, group)


def reduce_from_tensor_model_parallel_region(x, group):
    return _ReduceFromModelParallelRegion.apply(x, group)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_pos=SEQ, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_pos).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, seq_len):
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


class ParallelAttention(nn.Module):
    def __init__(self, tp_size, group):
        super().__init__()
        self.heads = HEADS // tp_size
        self.group = group
        self.q_proj = nn.Linear(HIDDEN, self.heads * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, self.heads * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, self.heads * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(self.heads * HEAD_DIM, HIDDEN, bias=False)
        self.rotary = RotaryEmbedding(HEAD_DIM)

    def forward(self, x):
        b, s, _ = x.shape
        x = copy_to_tensor_model_parallel_region(x, self.group)
        q = self.q_proj(x).view(b, s, self.heads, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.heads, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.heads, HEAD_DIM).transpose(1, 2)
        cos, sin = self.rotary(s)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        scores = torch.matmul(q, k.transpose(2, 3)) / (HEAD_DIM ** 0.5)
        pos = torch.arange(s)
        causal = pos[None, :] > pos[:, None]
        if NEG_INF:
            scores = scores.masked_fill(causal, float('-inf'))
        else:
            scores = scores.masked_fill(causal, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.heads * HEAD_DIM)
        out = self.o_proj(out)
        if BUG:
            return out
        return reduce_from_tensor_model_parallel_region(out, self.group)


class ParallelMLP(nn.Module):
    def __init__(self, tp_size, group):
        super().__init__()
        self.group = group
        self.gate_proj = nn.Linear(HIDDEN, FFN // tp_size, bias=False)
        self.up_proj = nn.Linear(HIDDEN, FFN // tp_size, bias=False)
        self.down_proj = nn.Linear(FFN // tp_size, HIDDEN, bias=False)

    def forward(self, x):
        x = copy_to_tensor_model_parallel_region(x, self.group)
        out = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return reduce_from_tensor_model_parallel_region(out, self.group)


class Block(nn.Module):
    def __init__(self, tp_size, group):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = ParallelAttention(tp_size, group)
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = ParallelMLP(tp_size, group)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


_GROUP = []


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    if not _GROUP:
        _GROUP.append(dist.new_group(list(range(ws))))
    torch.manual_seed(0)
    full = Block(1, None)  # the same initial weights on every process
    block = Block(ws, _GROUP[0])
    with torch.no_grad():
        # This rank's shards of the full weights, as Megatron's checkpoint loader splits them.
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(block.self_attn, name).weight.copy_(getattr(full.self_attn, name).weight.chunk(ws, 0)[rank])
        block.self_attn.o_proj.weight.copy_(full.self_attn.o_proj.weight.chunk(ws, 1)[rank])
        for name in ("gate_proj", "up_proj"):
            getattr(block.mlp, name).weight.copy_(getattr(full.mlp, name).weight.chunk(ws, 0)[rank])
        block.mlp.down_proj.weight.copy_(full.mlp.down_proj.weight.chunk(ws, 1)[rank])
    column = [block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj, block.mlp.gate_proj, block.mlp.up_proj]
    row = [block.self_attn.o_proj, block.mlp.down_proj]
    for m in column:
        cap.shard(m.weight, 0, "tp", name=_name(block, m.weight), role="param")
    for m in row:
        cap.shard(m.weight, 1, "tp", name=_name(block, m.weight), role="param")
    for norm in (block.input_layernorm, block.post_attention_layernorm):
        cap.replicate(norm.weight, name=_name(block, norm.weight), role="param")
    g = torch.Generator().manual_seed(1)
    x = cap.replicate(torch.randn(BATCH, SEQ, HIDDEN, generator=g), name="x")
    target = cap.replicate(torch.randn(BATCH, SEQ, HIDDEN, generator=g), name="target")
    opt = torch.optim.SGD(block.parameters(), lr=0.1)
    with cap.trace():
        out = block(x)
        loss = F.mse_loss(out, target)
        loss.backward()
        opt.step()
    cap.output("loss", loss, "R")
    cap.output("q_new", block.self_attn.q_proj.weight, "S(0)")
    cap.output("o_new", block.self_attn.o_proj.weight, "S(1)")
    cap.output("down_new", block.mlp.down_proj.weight, "S(1)")
    cap.output("norm_new", block.input_layernorm.weight, "R")


def _name(module, p):
    return next(n for n, q in module.named_parameters() if q is p).replace(".", "_")
