#!/usr/bin/env python3
"""A Linear layer's three products at the canonical models' shapes: Amp's kernels beside
`torch.mm` on one thread (issue 42, narrow products).

    /tmp/torchenv/bin/python benches/pytorch/gemm.py [--rounds 3] [--rows 8 64 200]

For each layer and row count m, the forward `y = x Wᵀ + b` (`torch.addmm`), the input
gradient `dx = dy W` (`torch.mm`) and the weight gradient `dW += dyᵀ x` (`addmm_` into the
accumulator), in GFLOP/s (2·m·in·out per product), medians of repeated calls. Amp's side
is `cargo bench -p amp-benches --bench gemm -- shapes ...`: the executor's kernels as the
Linear op calls them (padded weight copies for several rows, the rows taken out of the
padded output), in its own process. The rounds alternate the two sides so that a busy
stretch of a shared machine slows both; the table prints the medians over rounds and
Amp / torch.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (in, out, which layer): every Linear of the canonical models (docs/PERFORMANCE.md).
LAYERS = [
    (64, 128, "MLP l1"),
    (128, 128, "MLP l2, GGSNN-128 msg"),
    (256, 128, "list-reduce cell"),
    (32, 32, "GGSNN-32 msg"),
    (32, 96, "GGSNN-32 GRU"),
    (128, 384, "GGSNN-128 GRU"),
    (300, 450, "Tree-LSTM leaf"),
    (300, 750, "Tree-LSTM branch"),
    (256, 256, "MoE expert"),
]
PRODUCTS = ["forward", "input", "weight"]


def median_time(f, budget=0.1):
    """Median seconds per call of `f` over samples of at least ~20 µs, about `budget` s."""
    f()
    start = time.perf_counter()
    f()
    once = max(time.perf_counter() - start, 5e-8)
    per_sample = max(1, int(20e-6 / once))
    samples = []
    end = time.perf_counter() + budget
    while time.perf_counter() < end or len(samples) < 5:
        start = time.perf_counter()
        for _ in range(per_sample):
            f()
        samples.append((time.perf_counter() - start) / per_sample)
    return statistics.median(samples)


def torch_rates(shapes):
    """{(product, m, in, out): GFLOP/s} of torch on one thread."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rates = {}
    for m, inp, out in shapes:
        x, w = torch.rand(m, inp, generator=gen) - 0.5, torch.rand(out, inp, generator=gen) - 0.5
        b, dy = torch.rand(out, generator=gen) - 0.5, torch.rand(m, out, generator=gen) - 0.5
        dw = torch.zeros(out, inp)
        flops = 2.0 * m * inp * out
        calls = {
            "forward": lambda: torch.addmm(b, x, w.t()),
            "input": lambda: torch.mm(dy, w),
            "weight": lambda: dw.addmm_(dy.t(), x),
        }
        for product, call in calls.items():
            rates[(product, m, inp, out)] = flops / median_time(call) / 1e9
    return rates


def amp_rates(shapes):
    """The same from Amp's bench binary (built on first use)."""
    args = ["cargo", "bench", "-q", "-p", "amp-benches", "--bench", "gemm", "--", "quick", "shapes"]
    out = subprocess.run(args + [f"{m},{i},{o}" for m, i, o in shapes], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    rates = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "amp":
            rates[(parts[1], int(parts[2]), int(parts[3]), int(parts[4]))] = float(parts[5])
    missing = [(p, *s) for s in shapes for p in PRODUCTS if (p, *s) not in rates]
    if missing:
        sys.exit(f"the bench printed no rate for {missing[0]}:\n{out}")
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 64, 200])
    opts = ap.parse_args()
    shapes = [(m, inp, out) for inp, out, _ in LAYERS for m in opts.rows]
    amp, ours = {}, {}
    for r in range(opts.rounds):
        for key, rate in amp_rates(shapes).items():
            amp.setdefault(key, []).append(rate)
        for key, rate in torch_rates(shapes).items():
            ours.setdefault(key, []).append(rate)
        print(f"round {r + 1}/{opts.rounds} done", file=sys.stderr)
    print(f"GFLOP/s on one thread, medians of {opts.rounds} alternating rounds; torch {torch.__version__}")
    print()
    print("| layer | m×in→out | forward: Amp | torch | Amp / torch | dx: Amp | torch | Amp / torch "
          "| dW: Amp | torch | Amp / torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for inp, out, what in LAYERS:
        for m in opts.rows:
            cells = []
            for product in PRODUCTS:
                a = statistics.median(amp[(product, m, inp, out)])
                t = statistics.median(ours[(product, m, inp, out)])
                cells += [f"{a:.1f}", f"{t:.1f}", f"**{a / t:.2f}×**"]
            print(f"| {what} | {m}×{inp}→{out} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
