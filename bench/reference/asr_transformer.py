#!/usr/bin/env python3
"""PyTorch twin of `asr-transformer`: the speech recogniser of core/src/model/asr (two
stride-2 convolutions, a pre-norm transformer encoder with a CTC head, a pre-norm attention
decoder, the joint loss), the anchor for Headroom's CPU training speed on this model.

Usage: python3 asr_transformer.py --batch 8 --frames 600 --characters 90 --steps 5 --threads 2
                                  [--size tiny|small|medium|large] [--vocabulary 27] [--mels 80]
Prints one JSON line: {"framework": "pytorch", "patches_per_s": ..., "step_ms_median": ...}
(a "patch" is one utterance here, as `trainer-cli bench` counts it).

One micro-batch is `batch` utterances of `frames` log-mel frames each and `characters`
tokens each, the shape of `trainer-cli bench --model asr-transformer --frames F`'s measuring
batch (the tokens as it makes them). The step is Headroom's: the loss 0.3 x CTC (blank 0,
summed over an utterance's alignments, mean over utterances, infinities zeroed) + 0.7 x the
decoder's cross-entropy (summed over an utterance's tokens, mean over utterances),
global-norm clipping at 1.0, AdamW (lr 1e-3, weight decay 0.01). No dropout, as Headroom's.
The parameter count is printed so that the caller can check the twin is the same size.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import timing

# d_model, heads, encoder layers, decoder layers, feed-forward, conv channels: AsrShape's
# presets (core/src/model/asr/mod.rs).
SHAPES = {
    "tiny": (64, 2, 2, 1, 256, 32),
    "small": (128, 4, 6, 3, 1024, 128),
    "medium": (192, 4, 8, 4, 1536, 192),
    "large": (256, 4, 12, 6, 2048, 256),
}
BLANK, BOUNDARY = 0, 1
CTC_WEIGHT = 0.3
MAX_POSITIONS = 10_000


def subsampled(n):
    once = lambda m: (m - 3) // 2 + 1  # noqa: E731
    return 0 if n < 7 else once(once(n))


def sinusoids(length, d):
    """burn's PositionalEncoding: sin on even features, cos on odd, 10,000 as the base."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10_000.0) / d))
    table = torch.zeros(length, d)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


class Recogniser(nn.Module):
    def __init__(self, shape, mels, vocabulary):
        super().__init__()
        d, heads, enc, dec, ff, c = shape
        self.conv1 = nn.Conv2d(1, c, 3, stride=2)
        self.conv2 = nn.Conv2d(c, c, 3, stride=2)
        self.project = nn.Linear(c * subsampled(mels), d)
        self.register_buffer("positions", sinusoids(MAX_POSITIONS, d), persistent=False)
        layer = dict(d_model=d, nhead=heads, dim_feedforward=ff, dropout=0.0,
                     activation="gelu", batch_first=True, norm_first=True)
        # enable_nested_tensor off: the fast path is for inference, and a twin computes the
        # padded frames as Headroom does.
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), enc,
                                             enable_nested_tensor=False)
        self.encoder_norm = nn.LayerNorm(d)
        self.ctc_head = nn.Linear(d, vocabulary)
        self.embedding = nn.Embedding(vocabulary, d)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), dec)
        self.decoder_norm = nn.LayerNorm(d)
        self.output = nn.Linear(d, vocabulary)

    def encode(self, features, frames):
        n, length, mels = features.shape
        x = F.relu(self.conv2(F.relu(self.conv1(features.reshape(n, 1, length, mels)))))
        _, channels, steps, bands = x.shape
        x = x.transpose(1, 2).reshape(n, steps, channels * bands)
        x = self.project(x) + self.positions[:steps]
        lengths = torch.tensor([min(max(subsampled(f), 1), steps) for f in frames])
        pad = torch.arange(steps).unsqueeze(0) >= lengths.unsqueeze(1)
        return self.encoder_norm(self.encoder(x, src_key_padding_mask=pad)), lengths, pad

    def loss(self, features, frames, tokens):
        n = len(frames)
        encoded, lengths, memory_pad = self.encode(features, frames)
        longest = max(max(len(t) for t in tokens), 1)

        log_probs = F.log_softmax(self.ctc_head(encoded), 2).transpose(0, 1)
        targets = torch.tensor([t + [BOUNDARY] * (longest - len(t)) for t in tokens])
        target_lengths = torch.tensor([len(t) for t in tokens])
        ctc = F.ctc_loss(log_probs, targets, lengths, target_lengths, blank=BLANK,
                         reduction="none", zero_infinity=True).mean()

        steps_out = longest + 1
        inputs = [[BOUNDARY] + t for t in tokens]
        outputs = [t + [BOUNDARY] for t in tokens]
        pad_row = lambda r: r + [BOUNDARY] * (steps_out - len(r))  # noqa: E731
        x = self.embedding(torch.tensor([pad_row(r) for r in inputs])) + self.positions[:steps_out]
        causal = torch.triu(torch.ones(steps_out, steps_out, dtype=torch.bool), 1)
        input_lengths = torch.tensor([len(r) for r in inputs])
        target_pad = torch.arange(steps_out).unsqueeze(0) >= input_lengths.unsqueeze(1)
        decoded = self.decoder(x, encoded, tgt_mask=causal, tgt_key_padding_mask=target_pad,
                               memory_key_padding_mask=memory_pad)
        log_p = F.log_softmax(self.output(self.decoder_norm(decoded)), 2)
        picked = log_p.gather(2, torch.tensor([pad_row(r) for r in outputs]).unsqueeze(2))
        weights = (~target_pad).float()  # the same rows: input and output lengths are equal
        attention = -(picked.squeeze(2) * weights).sum() / n
        return CTC_WEIGHT * ctc + (1.0 - CTC_WEIGHT) * attention


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=SHAPES, default="tiny")
    ap.add_argument("--frames", type=int, default=600, help="log-mel frames per utterance")
    ap.add_argument("--characters", type=int, default=90, help="tokens per transcript")
    ap.add_argument("--vocabulary", type=int, default=27, help="tokens, blank and boundary included")
    ap.add_argument("--mels", type=int, default=80)
    a = timing.arguments(batch=8, patches=1, parser=ap)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    usable = max(a.vocabulary - 2, 1)

    def loss_of(model, n):
        features = torch.randn(n, a.frames, a.mels)
        tokens = [[BOUNDARY + 1 + (e + i) % usable for i in range(a.characters)]
                  for e in range(n)]
        return model.loss(features, [a.frames] * n, tokens)

    model = Recogniser(SHAPES[a.size], a.mels, a.vocabulary)
    timing.run("asr-transformer", model, loss_of, a)


if __name__ == "__main__":
    main()
