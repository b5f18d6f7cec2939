#!/usr/bin/env python3
"""PyTorch twin of `spec-classifier`: the machine-ID classifier of seed 000
(core/src/classifier/networks.rs), a small vision transformer (the default) or a plain CNN,
the anchor for Headroom's CPU training speed on this model.

Usage: python3 spec_classifier.py --batch 8 --patches 4 --steps 20 --threads 2
                                  [--arch vit|cnn] [--classes 4]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ...}

A patch is one 1x64x64 log-mel tile with its machine's class. The networks are Headroom's:
vit cuts the patch into 8 x 8 tiles by reshaping, each tile a token (a linear embedding plus
a learned position), four pre-norm encoder layers (width 64, 4 heads, feed-forward 128 with
GELU, no dropout), layer norm, the tokens' mean, a linear layer; cnn is four 3 x 3 stride-2
convolutions (16 to 128 channels) each with group normalisation (8 groups) and ReLU, the
map's mean, a linear layer. The step is Headroom's: cross-entropy (mean over the
micro-batch), global-norm clipping at 1.0, AdamW (lr 1e-3, weight decay 0.01).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import timing

TILE, PATCH = 8, 64
VIT_WIDTH, VIT_HEADS, VIT_LAYERS, VIT_FEED_FORWARD = 64, 4, 4, 128
CNN_CHANNELS = [16, 32, 64, 128]


class SpecVit(nn.Module):
    def __init__(self, classes):
        super().__init__()
        tiles = PATCH // TILE
        self.tiles = tiles
        self.embed = nn.Linear(TILE * TILE, VIT_WIDTH)
        self.positions = nn.Parameter(torch.randn(1, tiles * tiles, VIT_WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(VIT_WIDTH, VIT_HEADS, VIT_FEED_FORWARD, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        # enable_nested_tensor off: the fast path is for inference; Headroom trains.
        self.encoder = nn.TransformerEncoder(layer, VIT_LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(VIT_WIDTH)
        self.head = nn.Linear(VIT_WIDTH, classes)

    def forward(self, patches):
        n, t = patches.shape[0], self.tiles
        tiled = (patches.reshape(n, t, TILE, t, TILE).transpose(2, 3)
                 .reshape(n, t * t, TILE * TILE))
        x = self.encoder(self.embed(tiled) + self.positions)
        return self.head(self.norm(x).mean(dim=1))


class PlainCnn(nn.Module):
    def __init__(self, classes):
        super().__init__()
        layers, inputs = [], 1
        for outputs in CNN_CHANNELS:
            layers += [nn.Conv2d(inputs, outputs, 3, stride=2, padding=1),
                       nn.GroupNorm(8, outputs), nn.ReLU()]
            inputs = outputs
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(inputs, classes)

    def forward(self, patches):
        return self.head(self.features(patches).mean(dim=(2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["vit", "cnn"], default="vit")
    a = timing.arguments(batch=8, patches=4, parser=ap,
                         extra=[("--classes", 4, "machines told apart")])
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    def loss_of(model, n):
        return F.cross_entropy(model(torch.randn(n, 1, PATCH, PATCH)),
                               torch.arange(n) % a.classes)

    model = (SpecVit if a.arch == "vit" else PlainCnn)(a.classes)
    timing.run("spec-classifier", model, loss_of, a)


if __name__ == "__main__":
    main()
