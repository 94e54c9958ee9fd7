"""A Hugging Face GPT-2 style training step under torch DDP, written as `modeling_gpt2.py`
writes it, for `planproof capture --nproc 2 --axis dp`.

`Conv1D` (a linear layer whose weight is [in, out], applied with `torch.addmm`), heads split
with `view` + `permute`, `torch.matmul` attention divided by `torch.full([], sqrt(d))`, the
causal buffer `torch.tril(torch.ones(..., dtype=torch.bool)).view(1, 1, T, T)` applied with
`torch.where(causal, w, mask_value)` where `mask_value = torch.finfo(w.dtype).min`, the
hand-written tanh GELU (`NewGELUActivation`), `position_ids = torch.arange(T).unsqueeze(0)`,
the LM head tied to `wte` (`lm_head.weight = wte.weight`), the shifted loss
`F.cross_entropy(shift_logits.view(-1, V), shift_labels.view(-1))`; DDP; AdamW.

`--bug`: the labels are rank 0's rows on every rank (`labels` made from the collated batch
before the per-rank split), so rank 1 trains its inputs on another rank's targets.
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv

VOCAB, N_POS, N_EMBD, N_HEAD, N_LAYER = 16, 8, 8, 2, 1
SEQ, BATCH = 6, 4


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(size_out)
        return x


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        max_positions = N_POS
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.embed_dim = N_EMBD
        self.num_heads = N_HEAD
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device
        )
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output, attn_weights

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output, _ = self._attn(query, key, value)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        return self.c_proj(attn_output)


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, N_EMBD)
        self.c_proj = Conv1D(N_EMBD, intermediate_size)
        self.act = NewGELUActivation()

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        return self.c_proj(hidden_states)


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.mlp = GPT2MLP(4 * N_EMBD)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return residual + feed_forward_hidden_states


class GPT2LMHeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(N_POS, N_EMBD)
        self.h = nn.ModuleList([GPT2Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tie_weights()

    def forward(self, input_ids, labels=None):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long, device=input_ids.device)
        position_ids = position_ids.unsqueeze(0)
        inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        for block in self.h:
            hidden_states = block(hidden_states)
        hidden_states = self.ln_f(hidden_states)
        lm_logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            # Shift so that tokens < n predict n
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return loss, lm_logits


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    raw = GPT2LMHeadModel()
    for name, p in raw.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(raw)
    g = torch.Generator().manual_seed(3)
    batch = cap.replicate(torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), name="input_ids", values=(0, VOCAB))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    # This rank's rows, as a DistributedSampler with shuffle=False and a DataLoader give them.
    per = BATCH // ws
    input_ids = batch[rank * per:(rank + 1) * per]
    # The bug: the labels are taken from the collator's batch before it was split (rank 0's rows
    # on every rank), as when `labels = input_ids.clone()` is done on the wrong tensor.
    labels = batch[:per] if BUG else input_ids
    with cap.trace():
        model.train()
        loss, _ = model(input_ids, labels=labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # torch >= 2.0 default (1.13 writes zero_: see report)
    for name, p in raw.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
