"""A small GPT block trained data-parallel, with the causal mask written the other common way:
an ADDITIVE float mask (issue 33), for `planproof capture --axis dp`.

Hugging Face models and many nanoGPT forks build a float mask once, 0 where a token may look
and -inf where it may not, and add it to the attention scores:

    att = q @ k.transpose(-2, -1) * scale + mask
    att = F.softmax(att, dim=-1)

`--mask` picks how the mask is built, each as people write it:
  buffer  (default) `register_buffer("mask", torch.full((T, T), float('-inf')).triu(1))`, sliced
          `self.mask[:T, :T]` in forward (the buffer's values are a constant of the program);
  triu    built in forward: `torch.full((T, T), float('-inf'), device=x.device).triu(1)`
          (what `nn.Transformer.generate_square_subsequent_mask` computes);
  fill    built in forward: `torch.zeros(T, T).masked_fill(~causal, float('-inf'))` with a
          boolean `tril` of ones;
  finfo   Hugging Face's `(1.0 - causal) * torch.finfo(x.dtype).min`: a finite number, not -inf.

Token embedding, learned positions, LayerNorm, fused qkv split into heads, the additive mask,
GELU MLP, LM head, `F.cross_entropy`; each rank takes its rows of the batch inside the step,
gradients are all-reduced and divided by the world size (as DDP does), then SGD.

`--bug`: the gradients are all-reduced but not divided by the world size (summed, not averaged).
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BUG = "--bug" in sys.argv
MASK = sys.argv[sys.argv.index("--mask") + 1] if "--mask" in sys.argv else "buffer"
assert MASK in ("buffer", "triu", "fill", "finfo"), MASK

VOCAB, BLOCK, N_EMBD, N_HEAD, BATCH = 16, 4, 8, 2, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.proj = nn.Linear(N_EMBD, N_EMBD)
        self.n_head = N_HEAD
        if MASK == "buffer":
            self.register_buffer("mask", torch.full((BLOCK, BLOCK), float("-inf")).triu(1))

    def causal_mask(self, T, x):
        if MASK == "buffer":
            return self.mask[:T, :T]
        if MASK == "triu":
            return torch.full((T, T), float("-inf"), device=x.device).triu(1)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        if MASK == "fill":
            return torch.zeros(T, T, device=x.device).masked_fill(~causal, float("-inf"))
        return (1.0 - causal.to(x.dtype)) * torch.finfo(x.dtype).min

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(k.size(-1))) + self.causal_mask(T, x)
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Parameter(torch.randn(BLOCK, N_EMBD) * 0.02)
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.fc_proj = nn.Linear(4 * N_EMBD, N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe[:T]
        x = x + self.attn(self.ln_1(x))
        x = x + self.fc_proj(F.gelu(self.fc(self.ln_2(x))))
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = GPT()  # the same initial weights on every process
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    g = torch.Generator().manual_seed(1)
    data = cap.replicate(torch.randint(0, VOCAB, (BATCH, BLOCK + 1), generator=g), name="data", values=(0, VOCAB))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cap.trace():
        # This rank's rows of the batch, as a DistributedSampler gives them.
        rows = data.chunk(ws, 0)[rank]
        loss = model(rows[:, :-1], rows[:, 1:].contiguous())
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            if not BUG:
                p.grad /= ws
        opt.step()
        opt.zero_grad(set_to_none=True)
    for name, p in model.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
