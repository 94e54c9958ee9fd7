"""PyTorch's "NLP From Scratch: Translation with a Sequence to Sequence Network and Attention"
tutorial as written, trained under DDP with a hand-written dynamic loss scaler (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

The tutorial's `EncoderRNN` (`nn.Embedding`, `nn.Dropout`, `nn.GRU(batch_first=True)`),
`BahdanauAttention` (`Va(tanh(Wa(query) + Ua(keys)))`, `F.softmax`, `torch.bmm`) and
`AttnDecoderRNN` (the SOS input `torch.empty(...).fill_(SOS_token)`, a decoding loop with teacher
forcing, `torch.cat` of the embedding and the context into a GRU, `F.log_softmax`), `nn.NLLLoss`.
Encoder and decoder are each wrapped in `DistributedDataParallel`, each with its optimizer:
`SGD(momentum=0.9, nesterov=True, weight_decay=1e-4)` and a `StepLR` stepped after it. The loss
is scaled by a dynamic loss scaler written as apex's `fp16_utils` / fairseq write one
(`loss * loss_scale` backward, an overflow check `float(x.float().sum())` against inf and NaN
on every gradient, unscaling by `mul_(1 / loss_scale)` and a skipped step on overflow), then
`clip_grad_norm_`.

`--bug`: only the encoder is wrapped in DDP (the decoder handed to its optimizer as is): the
decoder's gradients are never averaged. `--bug-encoder`: the other way round, only the decoder
wrapped (verify ends UNKNOWN on it: docs/capture.md).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
BUG_ENCODER = "--bug-encoder" in sys.argv
SOS_token, EOS_token = 0, 1
IN_VOCAB, OUT_VOCAB, HIDDEN, SRC_LEN, MAX_LENGTH, BATCH = 9, 7, 8, 4, 3, 4


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super(BahdanauAttention, self).__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(decoder_input, decoder_hidden, encoder_outputs)
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)
            if target_tensor is not None:
                # Teacher forcing: Feed the target as the next input
                decoder_input = target_tensor[:, i].unsqueeze(1)
            else:
                # Without teacher forcing: use its own predictions as the next input
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)
        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)
        return output, hidden, attn_weights


class DynamicLossScaler:
    """apex.fp16_utils.DynamicLossScaler, as fairseq and Megatron copied it."""

    def __init__(self, init_scale=2 ** 15, scale_factor=2.0, scale_window=1000):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = scale_factor
        self.scale_window = scale_window

    def has_overflow(self, params):
        for p in params:
            if p.grad is not None and DynamicLossScaler._has_inf_or_nan(p.grad.data):
                return True
        return False

    @staticmethod
    def _has_inf_or_nan(x):
        cpu_sum = float(x.float().sum())
        if cpu_sum == float("inf") or cpu_sum == -float("inf") or cpu_sum != cpu_sum:
            return True
        return False

    def update_scale(self, overflow):
        if overflow:
            self.cur_scale = max(self.cur_scale / self.scale_factor, 1)
            self.last_overflow_iter = self.cur_iter
        elif (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
            self.cur_scale *= self.scale_factor
        self.cur_iter += 1

    @property
    def loss_scale(self):
        return self.cur_scale


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    encoder = EncoderRNN(IN_VOCAB, HIDDEN)
    decoder = AttnDecoderRNN(HIDDEN, OUT_VOCAB)
    for prefix, m in (("encoder", encoder), ("decoder", decoder)):
        for name, p in m.named_parameters():
            cap.replicate(p, name=prefix + "_" + name.replace(".", "_"), role="param")
    ddp_encoder = encoder if BUG_ENCODER else DDP(encoder)
    ddp_decoder = decoder if BUG else DDP(decoder)
    encoder_optimizer = torch.optim.SGD(ddp_encoder.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    decoder_optimizer = torch.optim.SGD(ddp_decoder.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    encoder_scheduler = torch.optim.lr_scheduler.StepLR(encoder_optimizer, step_size=1, gamma=0.5)
    decoder_scheduler = torch.optim.lr_scheduler.StepLR(decoder_optimizer, step_size=1, gamma=0.5)
    scaler = DynamicLossScaler()
    criterion = nn.NLLLoss()
    g = torch.Generator().manual_seed(3)
    src = cap.replicate(torch.randint(2, IN_VOCAB, (BATCH, SRC_LEN), generator=g), name="input_tensor", values=(2, IN_VOCAB))
    tgt = cap.replicate(torch.randint(1, OUT_VOCAB, (BATCH, MAX_LENGTH), generator=g), name="target_tensor", values=(1, OUT_VOCAB))
    params = list(encoder.parameters()) + list(decoder.parameters())
    with cap.trace():
        input_tensor, target_tensor = src.chunk(ws)[rank], tgt.chunk(ws)[rank]
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = ddp_encoder(input_tensor)
        decoder_outputs, _, _ = ddp_decoder(encoder_outputs, encoder_hidden, target_tensor)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss_scale = scaler.loss_scale
        (loss * loss_scale).backward()
        overflow = scaler.has_overflow(params)
        scaler.update_scale(overflow)
        if not overflow:
            for p in params:
                p.grad.data.mul_(1.0 / loss_scale)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            encoder_optimizer.step()
            decoder_optimizer.step()
        encoder_scheduler.step()
        decoder_scheduler.step()
    for prefix, m in (("encoder", encoder), ("decoder", decoder)):
        for name, p in m.named_parameters():
            cap.output(prefix + "_" + name.replace(".", "_") + "_new", p, "R")
