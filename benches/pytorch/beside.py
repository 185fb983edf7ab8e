#!/usr/bin/env python3
"""Tree-LSTM training throughput, Amp beside hand-batched PyTorch, in one run.

    cargo build --release -p amprun
    python3 benches/pytorch/beside.py --python /path/to/venv/bin/python   # a venv with torch

Alternates, for `--rounds` rounds: `amprun train examples/tree_lstm.amp` on the whole SST
training set (one epoch, one worker, asynchronous updates, plain SGD lr 0.01) for each
(instances in flight, update interval) of AMP_SETUPS, then `tree_lstm.py --strategy
levels --optimizer sgd` (1 thread, SST trees, fused SGD) at each batch size of
TORCH_BATCHES. Prints the median trees/s of each, and Amp's best over PyTorch's best.
An Amp update every m trees is a PyTorch minibatch of m trees: same number of updates.
Amp runs m trees in flight for an update every m: trees in flight go through the nodes
together, in the same batches, and finish together, and an update averages over all the
trees that finished together (`Worker::update_due`). With more in flight than the update
interval, updates cover more trees than the interval says; the table prints the trees per
update each run made, so that the comparison can be checked.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AMPRUN = os.path.join(ROOT, "target", "release", "amprun")


def sst_train():
    """SST's training file, where `amprun data get sst` put it."""
    found = subprocess.run([AMPRUN, "data", "path", "sst:train"], capture_output=True, text=True)
    if found.returncode != 0:
        sys.exit(found.stderr.strip())
    return found.stdout.strip()
SCRIPT = os.path.join(ROOT, "benches", "pytorch", "tree_lstm.py")

# (instances in flight, update every m instances)
AMP_SETUPS = [(8, 8), (16, 16), (25, 25)]
# Parameter groups of examples/tree_lstm.amp (emb, leaf, branch, head): the metrics'
# `updates` counts every group's.
AMP_GROUPS = 4
TORCH_BATCHES = [8, 16, 25]


def amp(keys, every, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [AMPRUN, "train", "examples/tree_lstm.amp", "--data", sst_train(), "--vocab", os.path.join(tmp, "vocab"),
           "--epochs", "1", "--max-active-keys", str(keys), "--async", "--min-update-frequency", str(every),
           "--optimizer", "sgd", "--lr", "0.01", "--metrics", metrics]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    last = [r for r in rows if r.get("split") == "train"][-1]
    return last["instances_per_s"], last["instances"] * AMP_GROUPS / max(last["updates"], 1)


def torch(python):
    cmd = [python, SCRIPT, "--sst", sst_train(), "--strategy", "levels", "--optimizer", "sgd", "--no-check",
           "--batch", *map(str, TORCH_BATCHES)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    rates = {}
    for line in done.stdout.splitlines():
        m = re.match(r"levels\s+(\d+)\s+([\d.]+)", line)
        if m:
            rates[int(m.group(1))] = float(m.group(2))
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="a Python with torch installed")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    if not os.path.exists(AMPRUN):
        sys.exit("build first: cargo build --release -p amprun")
    amp_rates = {s: [] for s in AMP_SETUPS}
    amp_per_update = {s: [] for s in AMP_SETUPS}
    torch_rates = {b: [] for b in TORCH_BATCHES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.rounds):
            for keys, every in AMP_SETUPS:
                rate, per_update = amp(keys, every, tmp)
                amp_rates[(keys, every)].append(rate)
                amp_per_update[(keys, every)].append(per_update)
            for b, rate in torch(opts.python).items():
                torch_rates[b].append(rate)
            print(f"round {r + 1}/{opts.rounds} done", file=sys.stderr, flush=True)
    print(f"Tree-LSTM on SST, 1 worker / 1 thread, plain SGD; training trees/s, medians of {opts.rounds}")
    print(f"{'':<34} {'trees/s':>8}  runs")
    for (keys, every), rates in amp_rates.items():
        runs = " ".join(f"{x:.0f}" for x in rates)
        per_update = statistics.median(amp_per_update[(keys, every)])
        label = f"Amp, {keys} in flight, update every {every}"
        print(f"{label:<34} {statistics.median(rates):>8.0f}  {runs}  ({per_update:.1f} trees per update)")
    for b, rates in torch_rates.items():
        runs = " ".join(f"{x:.0f}" for x in rates)
        print(f"{f'PyTorch levels, batch {b}':<34} {statistics.median(rates):>8.0f}  {runs}")
    best_amp = max(statistics.median(r) for r in amp_rates.values())
    best_torch = max(statistics.median(r) for r in torch_rates.values() if r)
    print(f"best Amp / best PyTorch: {best_amp / best_torch:.2f}x")
    for every in sorted({e for _, e in AMP_SETUPS} & set(TORCH_BATCHES)):
        a = max(statistics.median(r) for (k, e), r in amp_rates.items() if e == every)
        t = statistics.median(torch_rates[every])
        print(f"same update interval {every}: Amp / PyTorch {a / t:.2f}x")


if __name__ == "__main__":
    main()
