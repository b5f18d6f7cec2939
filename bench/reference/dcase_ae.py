#!/usr/bin/env python3
"""PyTorch reference of `dcase-ae`: the DCASE 2020 Task 2 baseline autoencoder (the
challenge's keras_model.py), the anchor for Headroom's CPU training speed on this model.

Usage: python3 dcase_ae.py --batch 64 --patches 8 --steps 20 --threads 2 [--accum 1]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ..., ...}

A patch is one frame stack: 5 consecutive frames of a 128-mel log-mel, 640 values. One
optimizer step consumes batch*patches*accum stacks. The step is Headroom's: MSE loss,
global-norm clipping at 1.0, AdamW (lr 1e-3, weight decay 0.01). Needs torch.
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64, help="spectrograms per micro-batch")
    ap.add_argument("--patches", type=int, default=8, help="frame stacks per spectrogram")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = DcaseAe()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    n = a.batch * a.patches
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accum):
            x = torch.randn(n, 1, 128, 5)
            y, flat = model(x)
            loss = F.mse_loss(y, flat) / a.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({
        "framework": "pytorch",
        "model": "dcase-ae",
        "torch": torch.__version__,
        "threads": a.threads,
        "batch": a.batch,
        "patches": a.patches,
        "accum": a.accum,
        "params": sum(p.numel() for p in model.parameters()),
        "step_ms_median": round(med * 1e3, 2),
        "patches_per_s": round(n * a.accum / med, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
