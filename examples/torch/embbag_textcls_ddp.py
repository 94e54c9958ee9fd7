"""Text classification with `nn.EmbeddingBag` under DDP, as PyTorch's text classification
tutorial writes it (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

The tutorial's `TextClassificationModel`: `nn.EmbeddingBag(vocab_size, embed_dim)` (mode
'mean') over the concatenated token ids of a batch with `offsets`, then `nn.Linear`; weights
initialized by `uniform_(-0.5, 0.5)`, the bias zeroed. Its `collate_batch` concatenates the
sentences (of different lengths) and builds `offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)`.
`nn.CrossEntropyLoss`, `clip_grad_norm_(model.parameters(), 0.1)`, SGD(lr=5); the model wrapped
in `DistributedDataParallel`, each rank its share of the batch as DistributedSampler gives it
(`indices[rank::world]`).

`--mode sum|max` builds the EmbeddingBag with that mode. `--padded`: the other usual collate,
`pad_sequence(batch_first=True, padding_value=0)` into a 2-D batch (one bag per row, no offsets)
with `nn.EmbeddingBag(..., padding_idx=0)`.

`--bug`: every rank collates rank 0's samples (`indices[0::world]`: the sampler built without
the rank, as happens when `DistributedSampler(dataset)` is replaced by hand-written striding),
so all ranks train on the same half of the batch.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
MODE = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "mean"
PADDED = "--padded" in sys.argv
PAD_IDX = 0
VOCAB, EMBED, CLASSES = 20, 8, 4
LENGTHS = [3, 5, 2, 4, 1, 3, 4, 2]  # tokens per sentence


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        if PADDED:
            self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False, mode=MODE, padding_idx=PAD_IDX)
        else:
            self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False, mode=MODE)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets=None):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for (_label, _text) in batch:
        label_list.append(_label)
        processed_text = _text.to(torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.stack(label_list)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets


def collate_padded(batch):
    # The other usual collate: sentences padded to the longest, one bag per row.
    label_list = torch.stack([_label for _label, _ in batch])
    text = nn.utils.rnn.pad_sequence([_text for _, _text in batch], batch_first=True, padding_value=PAD_IDX)
    return label_list, text


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = TextClassificationModel(VOCAB, EMBED, CLASSES)
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=5)
    g = torch.Generator().manual_seed(1)
    tokens = cap.replicate(torch.randint(1, VOCAB, (sum(LENGTHS),), generator=g), name="tokens", values=(1, VOCAB))
    labels = cap.replicate(torch.randint(0, CLASSES, (len(LENGTHS),), generator=g), name="labels", values=(0, CLASSES))
    starts = [sum(LENGTHS[:i]) for i in range(len(LENGTHS))]
    with cap.trace():
        dataset = [(labels[i], tokens[s:s + n]) for i, (s, n) in enumerate(zip(starts, LENGTHS))]
        indices = list(range(len(dataset)))[(0 if BUG else rank)::ws]
        optimizer.zero_grad()
        if PADDED:
            label, text = collate_padded([dataset[i] for i in indices])
            predicted_label = model(text)
        else:
            label, text, offsets = collate_batch([dataset[i] for i in indices])
            predicted_label = model(text, offsets)
        loss = criterion(predicted_label, label)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
