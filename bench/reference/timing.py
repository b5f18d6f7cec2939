"""The timed training step the PyTorch references share with `trainer-cli bench`: AdamW
(lr 1e-3, weight decay 0.01), global-norm clipping at 1.0, accumulation, warm-up steps, the
median step time, one JSON line."""
import argparse
import json
import resource
import statistics
import time

import torch


def arguments(batch, patches, extra=(), parser=None):
    """The options every reference takes, added to `parser` (a reference's own options
    first) or to a new one."""
    ap = parser or argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=batch, help="spectrograms per micro-batch")
    ap.add_argument("--patches", type=int, default=patches, help="patches per spectrogram")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to time the twin on a GPU")
    for name, default, text in extra:
        ap.add_argument(name, type=int, default=default, help=text)
    a = ap.parse_args()
    # Every tensor a reference makes (its parameters, its random batches) lands on this device.
    torch.set_default_device(a.device)
    return a


def run(name, model, loss_of, a):
    """Times `a.steps` optimizer steps of `model`; `loss_of(model, n)` is the loss of a
    micro-batch of `n` random patches."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    n = a.batch * a.patches

    def step():
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accum):
            (loss_of(model, n) / a.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    report(name, sum(p.numel() for p in model.parameters()), timed_steps(step, a), a)


def timed_steps(step, a):
    """Runs `step()` `a.warmup` times, then `a.steps` times timed: each one's seconds."""
    cuda = a.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        step()
        if cuda:
            # Kernels run asynchronously: a step is over when the GPU has done it.
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    return times


def report(name, params, times, a):
    """The JSON line `trainer-cli bench --json` is compared with: the median step of
    `times`, each of `a.batch * a.patches * a.accum` patches."""
    cuda = a.device.startswith("cuda")
    n = a.batch * a.patches
    med = statistics.median(times)
    print(json.dumps({
        "framework": "pytorch",
        "model": name,
        "torch": torch.__version__,
        "threads": a.threads,
        "batch": a.batch,
        "patches": a.patches,
        "accum": a.accum,
        "params": params,
        "step_ms_median": round(med * 1e3, 2),
        "patches_per_s": round(n * a.accum / med, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        # The caching allocator's peak of tensors in use (what burn's pool counts as in use).
        "cuda_peak_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
        "cuda_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1) if cuda else None,
    }))
