#!/usr/bin/env python3
"""PyTorch twin of `speech-clap` (core/src/contrastive): the recogniser's encoder as the audio
tower, a character transformer as the text tower, each mean-pooled over its own steps,
projected to one space and scaled to unit length, CLIP's symmetric InfoNCE with a learned
scale; a step of several micro-batches by gradient caching (Gao et al. 2021, GradCache), as
Headroom's cached step (core/src/step/cached.rs) computes it.

Usage: python3 speech_clap.py --batch 16 --accum 8 --frames 300 --characters 45 --steps 3
                              --threads 2 [--vocabulary 27] [--mels 80]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ...}
(a "patch" is one pair here, as `trainer-cli bench` counts it).

A step is `accum` micro-batches of `batch` pairs, each utterance `frames` log-mel frames
long and each transcript `characters` tokens, the shape of `trainer-cli bench --model
speech-clap --frames F`'s measuring batches. With one micro-batch, one ordinary step. With
several: every micro-batch but the last embedded without autodiff, the last with it; the
whole step's loss and its gradient with respect to those embeddings (and the scale); the
last micro-batch back-propagated from its part of that gradient, then each other one
embedded again with autodiff and back-propagated from its part; global-norm clipping at 1.0;
AdamW (lr 1e-3, weight decay 0.01). Every pair sees the step's other pairs as negatives.
The parameter count is printed so that the caller can check the twin is the same size (the
recogniser's CTC head, token embedding and output layer are built and take no part, as in
Headroom's audio tower).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import timing
from asr_transformer import BOUNDARY, MAX_POSITIONS, SHAPES, Recogniser, sinusoids

WIDTH = 64
TEXT_LAYERS = 2
MAX_CHARACTERS = 2_000
START_LOG_SCALE = 2.659_26
MAX_LOG_SCALE = 4.605_17


def masked_mean(x, lengths):
    n, steps, _ = x.shape
    lengths = torch.tensor([min(max(length, 1), steps) for length in lengths])
    mask = (torch.arange(steps).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return (x * (mask / lengths.unsqueeze(1)).unsqueeze(2)).sum(1)


def unit(x):
    return x / (x.square().sum(1, keepdim=True).sqrt() + 1e-8)


class PairNetworks(nn.Module):
    def __init__(self, shape, mels, vocabulary):
        super().__init__()
        d, heads, enc, _, ff, c = shape
        self.audio = Recogniser((d, heads, enc, 0, ff, c), mels, vocabulary)
        self.audio_head = nn.Linear(d, WIDTH)
        self.text_embedding = nn.Embedding(vocabulary, d)
        self.register_buffer("text_positions", sinusoids(MAX_CHARACTERS, d), persistent=False)
        layer = dict(d_model=d, nhead=heads, dim_feedforward=ff, dropout=0.0,
                     activation="gelu", batch_first=True, norm_first=True)
        self.text_encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer),
                                                  TEXT_LAYERS, enable_nested_tensor=False)
        self.text_norm = nn.LayerNorm(d)
        self.text_head = nn.Linear(d, WIDTH)
        self.log_scale = nn.Parameter(torch.tensor([START_LOG_SCALE]))

    def embed(self, features, frames, tokens):
        """`[n, 2 x WIDTH]`: each pair's audio and text embeddings side by side."""
        encoded, lengths, _ = self.audio.encode(features, frames)
        audio = self.audio_head(masked_mean(encoded, lengths.tolist()))
        characters = [max(len(t), 1) for t in tokens]
        longest = max(characters)
        ids = torch.tensor([t + [0] * (longest - len(t)) for t in tokens])
        x = self.text_embedding(ids) + self.text_positions[:longest]
        pad = torch.arange(longest).unsqueeze(0) >= torch.tensor(characters).unsqueeze(1)
        x = self.text_norm(self.text_encoder(x, src_key_padding_mask=pad))
        text = self.text_head(masked_mean(x, characters))
        return torch.cat([unit(audio), unit(text)], 1)

    def info_nce(self, embeddings):
        audio, text = embeddings[:, :WIDTH], embeddings[:, WIDTH:]
        n = audio.shape[0]
        logits = audio @ text.t() * self.log_scale.clamp(max=MAX_LOG_SCALE).exp()
        own = torch.arange(n)
        return (F.cross_entropy(logits, own) + F.cross_entropy(logits.t(), own)) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=SHAPES, default="tiny")
    ap.add_argument("--frames", type=int, default=300, help="log-mel frames per utterance")
    ap.add_argument("--characters", type=int, default=45, help="tokens per transcript")
    ap.add_argument("--vocabulary", type=int, default=27, help="tokens, blank and boundary included")
    ap.add_argument("--mels", type=int, default=80)
    a = timing.arguments(batch=16, patches=1, parser=ap)
    assert a.patches == 1, "a pair is one utterance and its transcript"
    assert a.frames <= MAX_POSITIONS * 4
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    usable = max(a.vocabulary - 2, 1)
    model = PairNetworks(SHAPES[a.size], a.mels, a.vocabulary)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def micro_batch(n):
        features = torch.randn(n, a.frames, a.mels)
        tokens = [[BOUNDARY + 1 + (e + i) % usable for i in range(a.characters)]
                  for e in range(n)]
        return features, [a.frames] * n, tokens

    def step():
        opt.zero_grad(set_to_none=True)
        batches = [micro_batch(a.batch) for _ in range(a.accum)]
        if a.accum == 1:
            model.info_nce(model.embed(*batches[0])).backward()
        else:
            # As Headroom's: the last micro-batch keeps its graph from the caching pass.
            with torch.no_grad():
                parts = [model.embed(*b) for b in batches[:-1]]
            last = model.embed(*batches[-1])
            cached = torch.cat(parts + [last.detach()]).requires_grad_(True)
            # The step's loss from the cached embeddings: their gradient, and the scale's.
            model.info_nce(cached).backward()
            grads = cached.grad.split(a.batch)
            last.backward(grads[-1])
            del last
            for b, grad in zip(batches[:-1], grads[:-1]):
                model.embed(*b).backward(grad)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    params = sum(p.numel() for p in model.parameters())
    timing.report("speech-clap", params, timing.timed_steps(step, a), a)


if __name__ == "__main__":
    main()
