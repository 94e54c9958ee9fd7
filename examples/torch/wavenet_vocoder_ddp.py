"""A WaveNet-style vocoder step under DDP, as speech people write it (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

Mel frames in, mu-law classes out (frame-level, 16 classes). The layers follow HiFi-GAN /
WaveNet code: every convolution wrapped in `torch.nn.utils.weight_norm`, dilated causal
`nn.Conv1d` with `padding=(k - 1) * dilation` and the right pad sliced off, a gated unit
`F.glu` (and `nn.GLU` in the post-net), a hand-written channel LayerNorm
(`torch.var_mean(..., unbiased=False)`), log-probabilities through `torch.logsumexp`, label
smoothing written out by hand (`(1 - eps) * nll + eps * smooth`), frames past each utterance's
length masked and the loss normalized by the frame count of the whole global batch
(all-reduced, as fairseq's `sample_size`), `clip_grad_value_`, Adam. The logged loss is
all-reduced and averaged.

`--bug`: the loss divided by the rank's own frame count (a per-rank mean: the ranks hold
utterances of different lengths, so DDP's average is not the global mean).
`--ctc`: the frame loss replaced by `F.ctc_loss` (no exact rule: the import exits 2).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import weight_norm
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
CTC = "--ctc" in sys.argv
N_MELS, CH, KERNEL, CLASSES, FRAMES = 4, 6, 2, 5, 6
BATCH = 4
LENGTHS = [6, 4, 5, 2]  # frames per utterance (the collate function pads to the longest)
EPS = 0.1


def init_weights(m, mean=0.0, std=0.01):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(mean, std)


class ChannelNorm(nn.Module):
    """LayerNorm over the channel dim of [B, C, T] (as Glow-TTS / VITS write it)."""

    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=1, keepdim=True, unbiased=False)
        x = (x - mean) * torch.rsqrt(var + self.eps)
        return x * self.gamma.view(1, -1, 1) + self.beta.view(1, -1, 1)


class ResidualBlock(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.pad = (KERNEL - 1) * dilation
        self.dilated = weight_norm(nn.Conv1d(CH, 2 * CH, KERNEL, dilation=dilation, padding=self.pad))
        self.res = weight_norm(nn.Conv1d(CH, CH, 1))
        self.norm = ChannelNorm(CH)

    def forward(self, x):
        h = self.dilated(x)[:, :, :-self.pad]  # causal: drop the right pad
        h = F.glu(h, dim=1)
        return self.norm(x + self.res(h))


class Vocoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(N_MELS, CH, 1))
        self.blocks = nn.ModuleList([ResidualBlock(1), ResidualBlock(2)])
        self.post = nn.Sequential(weight_norm(nn.Conv1d(CH, 2 * CH, 1)), nn.GLU(dim=1), nn.Conv1d(CH, CLASSES, 1))
        self.apply(init_weights)

    def forward(self, mel):
        x = self.pre(mel)
        for block in self.blocks:
            x = block(x)
        return self.post(x)


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    net = Vocoder()
    for name, p in net.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(net)
    g = torch.Generator().manual_seed(1)
    mels = cap.replicate(torch.randn(BATCH, N_MELS, FRAMES, generator=g), name="mels")
    targets = cap.replicate(torch.randint(0, CLASSES, (BATCH, FRAMES), generator=g), name="targets", values=(0, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.8, 0.99))
    running = torch.zeros(())
    with cap.trace():
        mel = mels.chunk(ws)[rank]
        target = targets.chunk(ws)[rank]
        lengths = torch.tensor(LENGTHS).chunk(ws)[rank]
        frame_mask = torch.arange(FRAMES)[None, :] < lengths[:, None]
        optimizer.zero_grad()
        logits = model(mel)  # [B, classes, T]
        if CTC:
            log_probs = F.log_softmax(logits, dim=1).permute(2, 0, 1)
            loss = F.ctc_loss(log_probs, target[:, :2] + 1, lengths, torch.full_like(lengths, 2))
        else:
            lprobs = logits - torch.logsumexp(logits, dim=1, keepdim=True)
            nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)
            smooth = -lprobs.mean(dim=1)
            frame_loss = (1.0 - EPS) * nll + EPS * smooth
            frame_loss = frame_loss.masked_fill(~frame_mask, 0.0)
            sample_size = frame_mask.sum()
            if not BUG:
                dist.all_reduce(sample_size)
                sample_size = sample_size / ws  # DDP averages the gradients over the ranks
            loss = frame_loss.sum() / sample_size
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=1.0)
        optimizer.step()
        running.add_(loss.detach())
        dist.all_reduce(running)
        running.div_(ws)
    cap.output("loss", running, "R")
    for name, p in net.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
