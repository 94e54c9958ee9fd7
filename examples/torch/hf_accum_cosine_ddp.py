"""A small causal LM fine-tuned the way Hugging Face example scripts and the Trainer write the
loop (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

The model: token + position embeddings, a pre-norm block whose LayerNorm is BERT's attribute
name (`self.LayerNorm`) and is applied with `F.layer_norm` (nanoGPT's LayerNorm with an optional
bias), attention scores as GPT-2's `_upcast_and_reordered_attn` computes them,
`torch.baddbmm(torch.empty(...), q, k, beta=0, alpha=scale)`, a causal mask from
`torch.tril(torch.ones(T, T))` applied with `masked_fill(mask == 0, float('-inf'))`, a SwiGLU
MLP (`F.silu(gate) * up`), GELU(tanh) on the LM head's transform, `F.cross_entropy(...,
ignore_index=-100)` on labels shifted inside the model.

The loop: weight-decay parameter groups built by name as `run_clm.py` builds them
(`no_decay = ["bias", "LayerNorm.weight"]`), AdamW, `CosineAnnealingLR`, torch DDP, gradient
accumulation over `gradient_accumulation_steps = 4` micro-batches with `model.no_sync()` on all
but the last and `loss = loss / gradient_accumulation_steps`, `clip_grad_norm_(..., 1.0)`,
`optimizer.step()`, `lr_scheduler.step()`, `optimizer.zero_grad()`; two optimizer steps per
capture, so the second runs at the schedule's second learning rate. Each rank takes its rows of
every micro-batch (a DistributedSampler's contiguous share).

`--bug`: the sync condition off by one, `step % gradient_accumulation_steps == 0` (the loop
counter starting at 0): the gradients are all-reduced after the FIRST micro-batch of each
accumulation window, and the other three stay each rank's own. (Syncing on more micro-batches
than the last, `step % gradient_accumulation_steps != 0`, is only slower: each all-reduce
averages the whole accumulated gradient, and an average of equal values changes nothing;
verify says VERIFIED for it, rightly.)
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
VOCAB, D, T, HEADS, FFN = 11, 8, 4, 2, 12
ACCUM, STEPS, PER_MICRO = 4, 2, 2  # PER_MICRO sequences per micro-batch (global)


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's), applied with F.layer_norm."""

    def __init__(self, ndim, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, L, _ = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q = q.view(B, L, HEADS, D // HEADS).permute(0, 2, 1, 3)
        k = k.view(B, L, HEADS, D // HEADS).permute(0, 2, 1, 3)
        v = v.view(B, L, HEADS, D // HEADS).permute(0, 2, 1, 3)
        # GPT-2's _upcast_and_reordered_attn: baddbmm into an uninitialized buffer with beta=0.
        scale_factor = 1.0 / math.sqrt(D // HEADS)
        attn_weights = torch.empty(B * HEADS, L, L, dtype=torch.float32)
        qq = q.reshape(-1, L, D // HEADS)
        kk = k.transpose(-1, -2).reshape(-1, D // HEADS, L)
        attn_weights = torch.baddbmm(attn_weights, qq.float(), kk.float(), beta=0, alpha=scale_factor)
        attn_weights = attn_weights.reshape(B, HEADS, L, L)
        attn_weights = attn_weights.masked_fill(self.mask[:, :, :L, :L] == 0, float("-inf"))
        attn_weights = F.softmax(attn_weights, dim=-1)
        out = torch.matmul(attn_weights, v)
        out = out.permute(0, 2, 1, 3).contiguous().view(B, L, D)
        return self.c_proj(out)


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(D, FFN, bias=False)
        self.up_proj = nn.Linear(D, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TinyCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(T, D)
        self.LayerNorm = LayerNorm(D)
        self.attn = Attention()
        self.ln_2 = LayerNorm(D, bias=False)
        self.mlp = SwiGLU()
        self.transform = nn.Linear(D, D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids, labels):
        pos = torch.arange(0, input_ids.shape[1], dtype=torch.long)
        x = self.wte(input_ids) + self.wpe(pos)
        x = x + self.attn(self.LayerNorm(x))
        x = x + self.mlp(self.ln_2(x))
        logits = self.lm_head(F.gelu(self.transform(x), approximate="tanh"))
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return F.cross_entropy(shift_logits.view(-1, VOCAB), shift_labels.view(-1), ignore_index=-100)


def name_of(n):
    return n.replace(".", "_")


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = TinyCausalLM()
    for n, p in model.named_parameters():
        cap.replicate(p, name=name_of(n), role="param")
    model = DDP(model)
    g = torch.Generator().manual_seed(1)
    ids = cap.replicate(torch.randint(0, VOCAB, (STEPS * ACCUM, PER_MICRO, T), generator=g), name="input_ids", values=(0, VOCAB - 1))
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=5e-3)
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    gradient_accumulation_steps = ACCUM
    model.train()
    with cap.trace():
        for step_ in range(STEPS * ACCUM):
            batch = ids[step_].chunk(ws)[rank]
            sync = (step_ % gradient_accumulation_steps == 0) if BUG else ((step_ + 1) % gradient_accumulation_steps == 0)
            if sync:
                loss = model(batch, labels=batch)
                loss = loss / gradient_accumulation_steps
                loss.backward()
            else:
                with model.no_sync():
                    loss = model(batch, labels=batch)
                    loss = loss / gradient_accumulation_steps
                    loss.backward()
            if (step_ + 1) % gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    for n, p in model.module.named_parameters():
        cap.output(name_of(n) + "_new", p, "R")
