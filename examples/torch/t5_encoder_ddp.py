"""A T5-style encoder layer trained under torch DDP, written as Hugging Face's
`modeling_t5.py` writes it, for `planproof capture --nproc 2 --axis dp`.

`T5LayerNorm` (RMS, no bias: `variance = x.pow(2).mean(-1, keepdim=True)`,
`x * torch.rsqrt(variance + eps)`), relative position bias from `torch.arange` and
`_relative_position_bucket` (`torch.abs`, `torch.log`, `.to(torch.long)`, `torch.min`,
`torch.full_like`, `torch.where`) looked up in an `nn.Embedding` and added to the unscaled
scores, `q/k/v/o` without bias, gated-GELU FFN (`wi_0`, `wi_1`, `wo`, GELU tanh), a mean-pooled
classification head, `F.cross_entropy`; DDP; AdamW (Adafactor is not in torch).

`--bug`: the relative position bias is computed with `bidirectional=False` on rank 1 only
(a causal bucket table where the encoder is bidirectional: its attention differs by rank).
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv

VOCAB, D_MODEL, D_KV, N_HEADS, D_FF, N_CLASSES = 16, 8, 4, 2, 16, 3
SEQ, BATCH = 6, 4
NUM_BUCKETS, MAX_DISTANCE = 8, 16


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class T5Attention(nn.Module):
    def __init__(self, has_relative_attention_bias=True):
        super().__init__()
        self.is_decoder = False
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = NUM_BUCKETS
        self.relative_attention_max_distance = MAX_DISTANCE
        self.d_model, self.key_value_proj_dim, self.n_heads = D_MODEL, D_KV, N_HEADS
        self.inner_dim = self.n_heads * self.key_value_proj_dim
        self.q = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, self.d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device=None):
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position,
            bidirectional=not (BUG and dist.get_rank() == 1),
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance,
        )
        values = self.relative_attention_bias(relative_position_bucket)
        values = values.permute([2, 0, 1]).unsqueeze(0)
        return values

    def forward(self, hidden_states, mask=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        def unshape(states):
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

        query_states = shape(self.q(hidden_states))
        key_states = shape(self.k(hidden_states))
        value_states = shape(self.v(hidden_states))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(seq_length, seq_length, device=scores.device)
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = unshape(torch.matmul(attn_weights, value_states))
        attn_output = self.o(attn_output)
        return attn_output, position_bias


class T5DenseGatedActDense(nn.Module):
    def __init__(self):
        super().__init__()
        self.wi_0 = nn.Linear(D_MODEL, D_FF, bias=False)
        self.wi_1 = nn.Linear(D_MODEL, D_FF, bias=False)
        self.wo = nn.Linear(D_FF, D_MODEL, bias=False)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        hidden_states = hidden_gelu * hidden_linear
        return self.wo(hidden_states)


class T5Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm_0 = T5LayerNorm(D_MODEL)
        self.SelfAttention = T5Attention(has_relative_attention_bias=True)
        self.layer_norm_1 = T5LayerNorm(D_MODEL)
        self.DenseReluDense = T5DenseGatedActDense()

    def forward(self, hidden_states):
        attention_output, _ = self.SelfAttention(self.layer_norm_0(hidden_states))
        hidden_states = hidden_states + attention_output
        forwarded_states = self.DenseReluDense(self.layer_norm_1(hidden_states))
        return hidden_states + forwarded_states


class T5EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, D_MODEL)
        self.block = T5Block()
        self.final_layer_norm = T5LayerNorm(D_MODEL)
        self.classifier = nn.Linear(D_MODEL, N_CLASSES)

    def forward(self, input_ids, labels):
        hidden_states = self.shared(input_ids)
        hidden_states = self.block(hidden_states)
        hidden_states = self.final_layer_norm(hidden_states)
        logits = self.classifier(hidden_states.mean(dim=1))
        return F.cross_entropy(logits, labels)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    raw = T5EncoderClassifier()
    for name, p in raw.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(raw)
    g = torch.Generator().manual_seed(5)
    ids = cap.replicate(torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), name="input_ids", values=(0, VOCAB))
    labels = cap.replicate(torch.randint(0, N_CLASSES, (BATCH,), generator=g), name="labels", values=(0, N_CLASSES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per = BATCH // ws
    with cap.trace():
        loss = model(ids[rank * per:(rank + 1) * per], labels[rank * per:(rank + 1) * per])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    for name, p in raw.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
