#!/usr/bin/env python3
"""PyTorch twin of `spec-gan`: the conditional spectrogram GAN of core/src/gan/networks.rs,
the anchor for Headroom's CPU training speed on this model.

Usage: python3 spec_gan.py --batch 16 --patches 4 --steps 20 --threads 2
       [--mels 64 --frames 64 --latent 64 --width 16 --classes 4]
Prints one JSON line, as the other references do (bench/reference/timing.py).

A patch is one 1 x mels x frames log-mel tile with its machine's class. One optimizer step
is Headroom's two phases over the same batch*patches*accum examples: the discriminator's
(hinge loss on the real patches and on the generator's, detached), then the generator's
(-mean D(G(z)), back-propagated through the discriminator); each phase clips its own
network's gradients to a global norm of 1.0 and steps its own Adam (beta1 0.5, no weight
decay). Spectral norm as Headroom computes it: four power iterations from a fixed start in
every forward (not PyTorch's `spectral_norm`, which carries its vector between steps and
iterates once). Needs torch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import timing

POWER_ITERATIONS = 4
LAYERS = 4


def unit(x):
    return x / (x.square().sum().sqrt() + 1e-12)


def spectral_norm(matrix):
    """The largest singular value of `matrix` by power iteration from a fixed start on the
    detached weight; the gradient reaches the weight through u^T W v."""
    plain = matrix.detach()
    rows = plain.shape[0]
    u = torch.ones(rows, 1) / rows ** 0.5
    v = unit(plain.t() @ u)
    for _ in range(1, POWER_ITERATIONS):
        u = unit(plain @ v)
        v = unit(plain.t() @ u)
    u = unit(plain @ v)
    return (u.t() @ matrix @ v).reshape(1)


def groups(channels):
    return next(g for g in range(8, 0, -1) if channels % g == 0)


class Generator(nn.Module):
    def __init__(self, mels, frames, latent, width, classes):
        super().__init__()
        side = 1 << LAYERS
        self.start = (-(-mels // side), -(-frames // side))
        self.patch = (mels, frames)
        self.channels = 8 * width
        self.embedding = nn.Parameter(torch.randn(classes, latent))
        self.project = nn.Linear(2 * latent, self.channels * self.start[0] * self.start[1])
        blocks, i = [], self.channels
        for layer in range(LAYERS):
            o = i // 2 if layer + 1 < LAYERS else i
            blocks += [nn.ConvTranspose2d(i, o, 4, stride=2, padding=1),
                       nn.GroupNorm(groups(o), o), nn.ReLU()]
            i = o
        self.blocks = nn.Sequential(*blocks)
        self.out = nn.Conv2d(i, 1, 3, padding=1)

    def forward(self, noise, classes):
        embedding = self.embedding / spectral_norm(self.embedding)
        x = self.project(torch.cat([noise, embedding[classes]], 1))
        x = F.relu(x.reshape(-1, self.channels, *self.start))
        x = self.out(self.blocks(x))
        return x[:, :, :self.patch[0], :self.patch[1]]


class Discriminator(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        i, o = 1, width
        for _ in range(LAYERS):
            bound = 1.0 / (i * 16) ** 0.5
            self.weights.append(nn.Parameter(torch.empty(o, i, 4, 4).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.zeros(o)))
            i, o = o, 2 * o
        bound = 1.0 / i ** 0.5
        self.score = nn.Parameter(torch.empty(1, i).uniform_(-bound, bound))
        self.score_bias = nn.Parameter(torch.zeros(1))
        self.embedding = nn.Parameter(torch.empty(classes, i).uniform_(-bound, bound))

    def forward(self, patches, classes):
        x = patches
        for w, b in zip(self.weights, self.biases):
            w = w / spectral_norm(w.reshape(w.shape[0], -1))
            x = F.leaky_relu(F.conv2d(x, w, b, stride=2, padding=1), 0.2)
        features = x.sum(dim=(2, 3))
        score = self.score / spectral_norm(self.score)
        plain = (features @ score.t()).reshape(-1) + self.score_bias
        embedding = self.embedding / spectral_norm(self.embedding)
        return plain + (embedding[classes] * features).sum(1)


def main():
    extra = [("--mels", 64, "mel bands of a patch"), ("--frames", 64, "frames of a patch"),
             ("--latent", 64, "noise values"), ("--width", 16, "the networks' width"),
             ("--classes", 4, "machines")]
    a = timing.arguments(batch=16, patches=4, extra=extra)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    g = Generator(a.mels, a.frames, a.latent, a.width, a.classes)
    d = Discriminator(a.width, a.classes)
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    n = a.batch * a.patches

    def batch():
        return (torch.randn(n, 1, a.mels, a.frames), torch.arange(n) % a.classes,
                torch.randn(n, a.latent), torch.randn(n, a.latent))

    def step():
        batches = [batch() for _ in range(a.accum)]
        opt_d.zero_grad(set_to_none=True)
        for real, classes, noise_d, _ in batches:
            with torch.no_grad():
                fake = g(noise_d, classes)
            loss = F.relu(1 - d(real, classes)).mean() + F.relu(1 + d(fake, classes)).mean()
            (loss / a.accum).backward()
        torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
        opt_d.step()
        opt_g.zero_grad(set_to_none=True)
        for _, classes, _, noise_g in batches:
            loss = -d(g(noise_g, classes), classes).mean()
            (loss / a.accum).backward()
        torch.nn.utils.clip_grad_norm_(g.parameters(), 1.0)
        opt_g.step()
        d.zero_grad(set_to_none=True)

    params = sum(p.numel() for p in g.parameters()) + sum(p.numel() for p in d.parameters())
    timing.report("spec-gan", params, timing.timed_steps(step, a), a)


if __name__ == "__main__":
    main()
