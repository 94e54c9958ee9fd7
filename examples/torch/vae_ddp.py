"""PyTorch's examples/vae (a variational autoencoder on MNIST-sized vectors) as written, trained
under DDP (issue 33), for `planproof capture --nproc 2 --mesh dp=2`.

The example's `VAE`: `fc1` + `F.relu`, the mean and log-variance heads `fc21` / `fc22`,
`reparameterize` with `std = torch.exp(0.5 * logvar)`, `eps = torch.randn_like(std)`,
`mu + eps * std`, the decoder `fc3`, `fc4` and `torch.sigmoid`; its `loss_function`:
`F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')` plus the KL term
`-0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())`, here divided by the rank's number of
samples `data.size(0)` (a per-sample loss, so that DDP's average of the ranks' gradients is the
single device's). Adam, as the example; the logged loss all-reduced and divided by the world size. Inputs in [0, 1] (pixel intensities), a 28x28 image
shrunk to 16 pixels.

`--bug`: the loss divided by the global batch size, the usual slip when porting a loop to DDP
(DDP already averages over the ranks, so the gradient is world-size times too small; Adam
cancels a uniform scale up to its eps, so training barely shows it).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUG = "--bug" in sys.argv
PIXELS, HIDDEN, LATENT, BATCH = 16, 12, 2, 8


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(PIXELS, HIDDEN)
        self.fc21 = nn.Linear(HIDDEN, LATENT)
        self.fc22 = nn.Linear(HIDDEN, LATENT)
        self.fc3 = nn.Linear(LATENT, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, PIXELS)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, PIXELS))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, PIXELS), reduction='sum')
    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def step(cap):
    ws, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = VAE()
    for name, p in model.named_parameters():
        cap.replicate(p, name=name.replace(".", "_"), role="param")
    model = DDP(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(5)
    images = cap.replicate(torch.rand(BATCH, 1, 4, 4, generator=g), name="data")
    with cap.trace():
        data = images.chunk(ws)[rank]
        model.train()
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        # per sample (DDP averages the ranks' gradients); the bug divides by the global batch
        loss = loss / (BATCH if BUG else data.size(0))
        loss.backward()
        optimizer.step()
        # the logged loss, averaged over the ranks
        train_loss = loss.detach().clone()
        dist.all_reduce(train_loss)
        train_loss /= ws
    cap.output("loss", train_loss, "R")
    for name, p in model.module.named_parameters():
        cap.output(name.replace(".", "_") + "_new", p, "R")
