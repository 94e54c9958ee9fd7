"""REINFORCE with rewards-to-go under DDP, as policy-gradient tutorials write it (issue 33), for
`planproof capture --nproc 2 --mesh dp=2`.

A small MLP policy over a batch of recorded episodes (observations, actions taken, rewards; each
rank takes its chunk of episodes), the rewards-to-go by the usual flip-cumsum-flip
`torch.flip(torch.cumsum(torch.flip(rewards, [1]), 1), [1])`, the
log-probabilities of the actions by `F.log_softmax(...).gather(-1, actions.unsqueeze(-1))`, the loss
`-(logp * rtg).mean()`; torch DDP, Adam.

`--bug`: rank 1 computes the rewards-to-go without the flips (`torch.cumsum(rewards, 1)`: the
rewards so far, not to go), a slip that still trains.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
EPISODES, STEPS, OBS, ACTIONS, HIDDEN = 4, 5, 4, 3, 8


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(OBS, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, ACTIONS))
    for name, p in policy.named_parameters():
        cap.replicate(p, name="policy_" + name.replace(".", "_"), role="param")
    model = DDP(policy)
    g = torch.Generator().manual_seed(1)
    obs = cap.replicate(torch.randn(EPISODES, STEPS, OBS, generator=g), name="obs")
    acts = cap.replicate(torch.randint(0, ACTIONS, (EPISODES, STEPS), generator=g), name="actions", values=(0, ACTIONS))
    rews = cap.replicate(torch.randn(EPISODES, STEPS, generator=g), name="rewards")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with cap.trace():
        o, a, r = obs.chunk(ws)[rank], acts.chunk(ws)[rank], rews.chunk(ws)[rank]
        if BUG and rank == 1:
            rtg = torch.cumsum(r, 1)
        else:
            rtg = torch.flip(torch.cumsum(torch.flip(r, [1]), 1), [1])
        logp = F.log_softmax(model(o), dim=-1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
        loss = -(logp * rtg).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
        reported /= ws
    cap.output("loss", reported, "R")
    for name, p in policy.named_parameters():
        cap.output("policy_" + name.replace(".", "_") + "_new", p, "R")
