#!/usr/bin/env python3
"""PyTorch reference of `sashimi`: the SaShiMi-style network of core/src/model/sashimi (S4D
layers in a pooling U-Net over 8-bit audio levels), the anchor for Headroom's CPU training
speed on this model.

Usage: python3 sashimi.py --batch 1 --sample-len 16000 --steps 5 --threads 2 [--size seed]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., ...}, a "patch" being
one crop of --sample-len levels.

The same network and parameters as Headroom's: pre-norm residual blocks (an S4D layer with
GELU and a linear output; a feed-forward layer of twice the width) at each resolution,
DownPool / UpPool (reshape and linear, the up-pooling shifted one pooled step), skips as
S4's sashimi.py without `unet`, an embedding and a 256-way head. The S4D kernel is the
plain Vandermonde sum of state-spaces/s4's s4d.py (`exp(dtA * arange(L))`, what PyTorch
users run), where Headroom builds the same kernel in blocks; the convolution is the same
FFT's (padded to the power of two at or above twice the length). The loss is the NLL in
bits per sample, the step Headroom's: clipping at 1.0, AdamW (lr 1e-3, weight decay 0.01).
Needs torch.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import timing

LEVELS = 256
SIZES = {
    # d_model, layers a resolution, pool, expand, state
    "small": (32, 2, (4, 4), 2, 32),
    "seed": (64, 8, (4, 4), 2, 64),
}


class S4D(nn.Module):
    def __init__(self, h, state):
        super().__init__()
        m = max(state // 2, 1)
        lo, hi = math.log(1e-3), math.log(1e-1)
        self.log_dt = nn.Parameter(torch.rand(h) * (hi - lo) + lo)
        self.log_a_real = nn.Parameter(torch.full((h, m), math.log(0.5)))
        self.a_imag = nn.Parameter(math.pi * torch.arange(m).float().repeat(h, 1))
        self.c_real = nn.Parameter(torch.randn(h, m) * math.sqrt(0.5))
        self.c_imag = nn.Parameter(torch.randn(h, m) * math.sqrt(0.5))
        self.d = nn.Parameter(torch.randn(h))

    def kernel(self, length):
        dt = self.log_dt.exp()[:, None]
        a = torch.complex(-self.log_a_real.exp(), self.a_imag)
        dta = a * dt
        c = torch.complex(self.c_real, self.c_imag) * (torch.exp(dta) - 1) / a
        powers = torch.exp(dta[..., None] * torch.arange(length))
        return 2 * torch.einsum("hn,hnl->hl", c, powers).real

    def forward(self, u):  # [b, h, l]
        length = u.shape[-1]
        n = 1 << (2 * length - 1).bit_length()
        k = self.kernel(length)
        y = torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(k, n=n), n=n)[..., :length]
        return y + u * self.d[:, None]


class Residual(nn.Module):
    def __init__(self, h, state=None, expand=None):
        super().__init__()
        self.norm = nn.LayerNorm(h)
        self.s4 = S4D(h, state) if state else None
        self.inner = nn.Linear(h, h * expand) if expand else None
        self.output = nn.Linear(h * expand if expand else h, h)

    def forward(self, x):
        z = self.norm(x)
        z = self.s4(z.transpose(1, 2)).transpose(1, 2) if self.s4 is not None else self.inner(z)
        return x + self.output(F.gelu(z))


class DownPool(nn.Module):
    def __init__(self, h, expand, factor):
        super().__init__()
        self.factor = factor
        self.linear = nn.Linear(h * factor, h * expand)

    def forward(self, x):
        b, length, h = x.shape
        return self.linear(x.reshape(b, length // self.factor, h * self.factor))


class UpPool(nn.Module):
    def __init__(self, h, expand, factor):
        super().__init__()
        self.factor = factor
        self.linear = nn.Linear(h, h // expand * factor)

    def forward(self, x):
        b, pooled, _ = x.shape
        y = self.linear(x)
        y = torch.cat([torch.zeros_like(y[:, :1]), y[:, :-1]], dim=1)
        return y.reshape(b, pooled * self.factor, y.shape[2] // self.factor)


class Sashimi(nn.Module):
    def __init__(self, d_model, layers, pool, expand, state):
        super().__init__()

        def blocks(h):
            return nn.ModuleList(
                [m for _ in range(layers) for m in (Residual(h, state=state), Residual(h, expand=expand))]
            )

        self.embedding = nn.Embedding(LEVELS, d_model)
        h = d_model
        self.down = nn.ModuleList()
        for f in pool:
            self.down.append(DownPool(h, expand, f))
            h *= expand
        self.center = blocks(h)
        self.up = nn.ModuleList()
        self.up_blocks = nn.ModuleList()
        for f in reversed(pool):
            self.up.append(UpPool(h, expand, f))
            h //= expand
            self.up_blocks.append(blocks(h))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, LEVELS)

    def forward(self, inputs):
        x = self.embedding(inputs)
        skips = [x]
        for pool in self.down:
            x = pool(x)
            skips.append(x)
        for block in self.center:
            x = block(x)
        x = x + skips.pop()
        for pool, stage in zip(self.up, self.up_blocks):
            x = pool(x) + skips.pop()
            stage_input = x
            for block in stage:
                x = block(x)
            x = x + stage_input
        return self.head(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    a = timing.arguments(
        batch=1, patches=1, extra=[("--sample-len", 16000, "levels in one crop")], parser=ap
    )
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Sashimi(*SIZES[a.size])

    def loss_of(model, n):
        levels = torch.randint(0, LEVELS, (n, a.sample_len))
        start = torch.full((n, 1), LEVELS // 2)
        inputs = torch.cat([start, levels[:, :-1]], dim=1)
        logits = model(inputs)
        return F.cross_entropy(logits.reshape(-1, LEVELS), levels.reshape(-1)) / math.log(2)

    timing.run("sashimi", model, loss_of, a)


if __name__ == "__main__":
    main()
