#!/usr/bin/env python3
"""The default model's PyTorch reference (shared/bench/reference_vqae.py, the user's anchor,
loaded as it is) timed by the shared step of timing.py, which adds what the anchor lacks: a
GPU (--device cuda, with the step synchronised and the CUDA allocator's peaks reported).

Usage: python3 vq_patch_ae.py [--reference PATH] --batch 16 --patches 1 --steps 20 --device cuda
The step is the anchor's loss (reconstruction MSE + the quantizer's loss) under timing.py's
AdamW (its weight decay 0.01 where the anchor has none: the same work per step).
"""
import argparse
import importlib.util
import os

import torch.nn.functional as F
import torch

import timing

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", default=os.path.join(HERE, "../../../shared/bench/reference_vqae.py"))
    a = timing.arguments(batch=16, patches=1, parser=ap)
    spec = importlib.util.spec_from_file_location("reference_vqae", a.reference)
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    def loss_of(model, n):
        x = torch.randn(n, 1, 64, 64)
        y, vq_loss = model(x)
        return F.mse_loss(y, x) + vq_loss

    timing.run("vq-patch-ae", anchor.VqPatchAutoencoder(), loss_of, a)


if __name__ == "__main__":
    main()
