"""A BERT-style sequence classifier with padded batches under DDP, as Hugging Face's
`modeling_bert.py` and its fine-tuning scripts write it (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

Padded token ids (pad id 0, `nn.Embedding(padding_idx=0)`), `attention_mask = input_ids != 0`,
learned position embeddings read through a registered `position_ids` buffer
(`torch.arange(max_len).expand((1, -1))`), weights initialized by `self.apply(self._init_weights)`
(`normal_(std=0.02)`, zero biases, the padding row zeroed), post-norm attention with the padded
keys masked by `masked_fill(~mask, torch.tensor(torch.finfo(dtype).min))`, a GELU FFN, the
tanh pooler over [CLS], `F.cross_entropy`; torch DDP, AdamW. The logged loss is kept in a
0-d tracker updated by `tracker.fill_(loss.detach())` (as metric modules keep their state),
all-reduced and averaged over the ranks.

`--bug`: the labels are taken `labels[rank::world]` (a DistributedSampler-style stride) while
the ids are chunked, so each rank trains on mismatched pairs.
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
VOCAB, HIDDEN, HEADS, FFN, MAX_LEN, CLASSES = 20, 16, 2, 32, 8, 3
BATCH = 8


class BertSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_attention_heads = HEADS
        self.attention_head_size = HIDDEN // HEADS
        self.all_head_size = HIDDEN
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        mask_value = torch.tensor(torch.finfo(attention_scores.dtype).min)
        attention_scores = attention_scores.masked_fill(~attention_mask[:, None, None, :], mask_value)
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = BertSelfAttention()
        self.attention_output = nn.Linear(HIDDEN, HIDDEN)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate = nn.Linear(HIDDEN, FFN)
        self.output = nn.Linear(FFN, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, hidden_states, attention_mask):
        attn = self.attention_output(self.attention(hidden_states, attention_mask))
        hidden_states = self.attention_norm(attn + hidden_states)
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(ffn + hidden_states)


class BertForSequenceClassification(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN, padding_idx=0)
        self.position_embeddings = nn.Embedding(MAX_LEN, HIDDEN)
        self.embeddings_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(MAX_LEN).expand((1, -1)))
        self.layer = BertLayer()
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, CLASSES)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def forward(self, input_ids, attention_mask, labels):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        hidden_states = self.layer(self.embeddings_norm(embeddings), attention_mask)
        pooled_output = torch.tanh(self.pooler(hidden_states[:, 0]))
        logits = self.classifier(pooled_output)
        return F.cross_entropy(logits.view(-1, CLASSES), labels.view(-1))


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = BertForSequenceClassification()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (BATCH, MAX_LEN), generator=g)
    ids[:, 0] = 1  # [CLS]
    for row, length in enumerate([8, 5, 6, 3, 7, 8, 4, 6]):
        ids[row, length:] = 0  # padding
    input_ids = cap.replicate(ids, name="input_ids", values=(0, VOCAB))
    labels = cap.replicate(torch.randint(0, CLASSES, (BATCH,), generator=g), name="labels", values=(0, CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tracker = torch.zeros(())
    with cap.trace():
        batch_ids = input_ids.chunk(ws)[rank]
        batch_labels = labels[rank::ws] if BUG else labels.chunk(ws)[rank]
        attention_mask = batch_ids != 0
        opt.zero_grad(set_to_none=True)
        loss = model(batch_ids, attention_mask, batch_labels)
        loss.backward()
        opt.step()
        tracker.fill_(loss.detach())
        dist.all_reduce(tracker)
        tracker /= ws
    cap.output("loss", tracker, "R")
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
