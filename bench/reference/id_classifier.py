#!/usr/bin/env python3
"""PyTorch reference of `id-classifier`: the MobileNetV2-style machine-ID classifier of
core/src/model/id_classifier.rs, the anchor for Headroom's CPU training speed on this model.

Usage: python3 id_classifier.py --batch 16 --patches 4 --steps 20 --threads 2 [--classes 4]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ..., ...}

A patch is one 1x64x64 log-mel tile with its machine's class. One optimizer step consumes
batch*patches*accum patches. The step is Headroom's: cross-entropy, global-norm clipping at
1.0, AdamW (lr 1e-3, weight decay 0.01). Needs torch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import timing

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
    a = timing.arguments(batch=16, patches=4, extra=[("--classes", 4, "machines told apart")])
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    def loss_of(model, n):
        return F.cross_entropy(model(torch.randn(n, 1, 64, 64)), torch.arange(n) % a.classes)

    timing.run("id-classifier", IdClassifier(a.classes), loss_of, a)


if __name__ == "__main__":
    main()
