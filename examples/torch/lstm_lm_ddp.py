"""An LSTM language model trained with torch DDP, as the PyTorch word-language-model example
writes it: nn.Embedding(padding_idx=0), nn.LSTM(batch_first=True), nn.Linear, cross-entropy
with ignore_index=0 (the padding), clip_grad_norm_, SGD with momentum. For
`planproof capture --nproc 2 --axis dp`.

Its ATen ops (unbind over time, unsafe_split of the gates, sigmoid_ / tanh_ in place on the
gate pieces, embedding_dense_backward with padding_idx) import, and the imported logical graph
computes PyTorch's numbers (test/capture.test.ts). `verify --infer` ends UNKNOWN: the parameter
updates' stages go past the exact normal form's bound (docs/capture.md).
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class LM(nn.Module):
    def __init__(self, vocab=12, d=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.rnn = nn.LSTM(d, d, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.out(h)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = LM()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    ids = cap.replicate(torch.randint(0, 12, (4, 5), generator=g), name="ids", values=(0, 12))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with cap.trace():
        x = ids.chunk(ws)[rank]
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 12), x[:, 1:].reshape(-1), ignore_index=0)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
