#!/usr/bin/env python3
"""PyTorch reference of `id-classifier`: the MobileNetV2-style machine-ID classifier of
core/src/model/id_classifier.rs, the anchor for Headroom's CPU training speed on this model.

Usage: python3 id_classifier.py --batch 16 --patches 4 --steps 20 --threads 2 [--classes 4]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ..., ...}

A patch is one 1x64x64 log-mel tile with its machine's class. One optimizer step consumes
batch*patches*accum patches. The step is Headroom's: cross-entropy, global-norm clipping at
1.0, AdamW (lr 1e-3, weight decay 0.01). Needs torch.
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCKS = [(1, 16, 1), (4, 24, 2), (4, 24, 1), (4, 32, 2), (4, 32, 1), (4, 64, 2)]
STEM, HEAD = 16, 128


def conv_norm(i, o, k, s, groups, relu):
    layers = [nn.Conv2d(i, o, k, stride=s, padding=k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(o)]
    if relu:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, i, t, o, s):
        super().__init__()
        h = i * t
        layers = [conv_norm(i, h, 1, 1, 1, True)] if t != 1 else []
        layers += [conv_norm(h, h, 3, s, h, True), conv_norm(h, o, 1, 1, 1, False)]
        self.body = nn.Sequential(*layers)
        self.residual = s == 1 and i == o

    def forward(self, x):
        y = self.body(x)
        return y + x if self.residual else y


class IdClassifier(nn.Module):
    def __init__(self, classes):
        super().__init__()
        layers, i = [conv_norm(1, STEM, 3, 2, 1, True)], STEM
        for t, o, s in BLOCKS:
            layers.append(InvertedResidual(i, t, o, s))
            i = o
        layers.append(conv_norm(i, HEAD, 1, 1, 1, True))
        self.features = nn.Sequential(*layers)
        self.classify = nn.Linear(HEAD, classes)

    def forward(self, x):
        return self.classify(self.features(x).mean(dim=(2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16, help="spectrograms per micro-batch")
    ap.add_argument("--patches", type=int, default=4, help="patches per spectrogram")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--classes", type=int, default=4, help="machines told apart")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = IdClassifier(a.classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    n = a.batch * a.patches
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accum):
            x = torch.randn(n, 1, 64, 64)
            y = torch.arange(n) % a.classes
            loss = F.cross_entropy(model(x), y) / a.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({
        "framework": "pytorch",
        "model": "id-classifier",
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
