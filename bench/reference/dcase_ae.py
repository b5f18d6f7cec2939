#!/usr/bin/env python3
"""PyTorch reference of `dcase-ae`: the DCASE 2020 Task 2 baseline autoencoder (the
challenge's keras_model.py), the anchor for Headroom's CPU training speed on this model.

Usage: python3 dcase_ae.py --batch 64 --patches 8 --steps 20 --threads 2 [--accum 1]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ..., ...}

A patch is one frame stack: 5 consecutive frames of a 128-mel log-mel, 640 values. One
optimizer step consumes batch*patches*accum stacks. The step is Headroom's: MSE loss,
global-norm clipping at 1.0, AdamW (lr 1e-3, weight decay 0.01). Needs torch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import timing


def block(i, o):
    return [nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU()]


class DcaseAe(nn.Module):
    def __init__(self, mels=128, frames=5, hidden=128, bottleneck=8):
        super().__init__()
        n = mels * frames
        layers = (block(n, hidden) + block(hidden, hidden) + block(hidden, hidden)
                  + block(hidden, hidden) + block(hidden, bottleneck)
                  + block(bottleneck, hidden) + block(hidden, hidden) + block(hidden, hidden)
                  + block(hidden, hidden) + [nn.Linear(hidden, n)])
        self.net = nn.Sequential(*layers)

    def forward(self, x):  # x: [N, 1, mels, frames]
        flat = x.reshape(x.shape[0], -1)
        return self.net(flat), flat


def main():
    a = timing.arguments(batch=64, patches=8)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    def loss_of(model, n):
        y, flat = model(torch.randn(n, 1, 128, 5))
        return F.mse_loss(y, flat)

    timing.run("dcase-ae", DcaseAe(), loss_of, a)


if __name__ == "__main__":
    main()
