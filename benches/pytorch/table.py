#!/usr/bin/env python3
"""Issue 26's table: every canonical model, Amp beside its best hand-batched PyTorch, in one run.

    python3 benches/pytorch/table.py --python /tmp/torchenv/bin/python [--amprun /tmp/amprun.main]

First writes the shared data (`datasets.py`, into a temporary folder) and runs every
PyTorch script's `--check` against `amprun grad` (loss and every gradient to 1e-4 on the
same parameters and instances; `--no-check` skips it). Then, for `--rounds` rounds,
alternates model by model: the PyTorch script (1 thread, plain SGD lr 0.01, minibatches
of each size of `--batch`), and `amprun train` on the same file and instances with 1 and
with 2 workers, each with as many instances in flight as the minibatch and an update per
minibatch (`--max-active-keys m --async --min-update-frequency m`, plain SGD lr 0.01, one
epoch). Prints the median training instances/s of each and the ratios Amp / PyTorch and
Amp 2 workers / 1 as a Markdown table, then every run's numbers.

Beside them, "products alone" (`floor.py`, measured once before the rounds): the
instances/s one thread would reach doing nothing but the model's Linear products at
PyTorch's single-thread GEMM rate, and whether the issue's goal (2× PyTorch; MoE 10×)
lies below it; where it does not, no executor meets the goal with these GEMMs.

The machine's load changes both sides' rates; the rounds alternate so that a busy stretch
slows both, but the ratios of one run on a shared 2-core machine are still noisy: record
`uptime` beside them.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_AMPRUN = "/tmp/amprun.main" if os.path.exists("/tmp/amprun.main") else os.path.join(
    ROOT, "target", "release", "amprun")

# name: (label, data file, instances timed, PyTorch script and its flags, amprun model args,
# PyTorch variant). The PyTorch flags and the `-D` flags give the same hyperparameters.
ROWS = {
    "ggsnn32": ("GGSNN, hidden 32, 10–30 nodes, 5 steps", "ggsnn", 2000,
                ["ggsnn.py", "--hidden", "32"],
                ["examples/ggsnn.amp", "-D", "hidden=32"], "batched"),
    "ggsnn128": ("GGSNN, hidden 128", "ggsnn", 1000,
                 ["ggsnn.py", "--hidden", "128"],
                 ["examples/ggsnn.amp", "-D", "hidden=128"], "batched"),
    "tree_lstm": ("Tree-LSTM, E 300, H 150, 5–50 leaves", "tree_lstm", 1000,
                  ["tree_lstm.py", "--strategy", "levels", "--optimizer", "sgd", "--no-check", "--train-only"],
                  ["examples/tree_lstm.amp"], "level-batched"),
    "list_reduce": ("list-reduce, H 128", "list_reduce", 20000,
                    ["list_reduce.py"], ["examples/list_reduce.amp"], "bucketed"),
    "moe": ("MoE, d 256, 64 experts, top-2", "moe", 10000,
            ["moe.py"], ["examples/moe.amp"], "dispatch"),
    "mlp": ("MLP, hidden 128, digits", "mlp", 20000,
            ["mlp.py"], ["examples/mlp.amp"], "batched"),
}


def run(cmd):
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def torch_rates(opts, row, data, batches, extra=()):
    """{batch: training instances/s} of one PyTorch script run over all batch sizes, with
    `extra` flags (`--threads N`, `--ddp N`)."""
    _, _, count, script, _, _ = ROWS[row]
    cmd = [opts.python, os.path.join(HERE, script[0]), *script[1:], *extra, "--batch", *map(str, batches)]
    if script[0] == "tree_lstm.py":
        cmd += ["--data", data, "--trees", str(count), "--warmup", "100"]
    else:
        cmd += ["--data", data, "--instances", str(count), "--warmup", "200"]
    rates = {}
    for line in run(cmd).splitlines():
        m = re.match(r"train \S+ \S+ (\d+) ([\d.]+)", line) or re.match(r"levels\s+(\d+)\s+([\d.]+)", line)
        if m:
            rates[int(m.group(1))] = float(m.group(2))
    if set(rates) != set(batches):
        sys.exit(f"{' '.join(cmd)}: expected a rate per batch size, got {rates}")
    return rates


def amp_rate(opts, row, data, batch, workers, tmp):
    """Training instances/s of one `amprun train` epoch, and the instances per update."""
    _, _, count, _, model_args, _ = ROWS[row]
    metrics = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run([opts.amprun, "train", *model_args, "--data", data, "--limit", str(count), "--epochs", "1",
         "--workers", str(workers), "--max-active-keys", str(batch), "--async",
         "--min-update-frequency", str(batch), "--optimizer", "sgd", "--lr", "0.01", "--metrics", metrics])
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("split") == "train"][-1]["instances_per_s"]


def products_alone(opts, tmp):
    """{(row, batch): instances/s of the row's Linear products alone} (`floor.py`)."""
    out = run([opts.python, os.path.join(HERE, "floor.py"), "--data-dir", tmp, "--models", *opts.models,
               "--batch", *map(str, opts.batch)])
    floors = {}
    for line in out.splitlines():
        m = re.match(r"floor (\S+) (\d+) ([\d.]+)", line)
        if m:
            floors[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return floors


def check(opts, row, data):
    _, _, _, script, _, _ = ROWS[row]
    flags = [f for f in script[1:] if f not in ("--no-check", "--train-only")]
    out = run([opts.python, os.path.join(HERE, script[0]), *flags, "--data", data, "--check",
               "--amprun", opts.amprun])
    print(f"{ROWS[row][0]}: {out.strip().splitlines()[-1]}", file=sys.stderr, flush=True)


def fmt(x):
    return f"{x:,.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="a Python with torch and safetensors")
    ap.add_argument("--amprun", default=DEFAULT_AMPRUN, help=f"a release amprun (default {DEFAULT_AMPRUN})")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 25, 64])
    ap.add_argument("--models", nargs="+", choices=list(ROWS), default=list(ROWS))
    ap.add_argument("--no-check", action="store_true", help="skip the checks against amprun grad")
    opts = ap.parse_args()
    if not os.path.exists(opts.amprun):
        sys.exit(f"{opts.amprun} not found: cargo build --release -p amprun, or pass --amprun")

    load_before = os.getloadavg()
    torch = {(r, b): [] for r in opts.models for b in opts.batch}
    amp1 = {(r, b): [] for r in opts.models for b in opts.batch}
    amp2 = {(r, b): [] for r in opts.models for b in opts.batch}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for row in opts.models:
            kind, count = ROWS[row][1], ROWS[row][2]
            counts = max(count, files.get(kind, (None, 0))[1])
            files[kind] = (os.path.join(tmp, f"{kind}.jsonl"), counts)
        for kind, (_, count) in files.items():
            run([sys.executable, os.path.join(HERE, "datasets.py"), tmp, "--models", kind, "--count", str(count)])
        data = {row: files[ROWS[row][1]][0] for row in opts.models}
        if not opts.no_check:
            for row in opts.models:
                check(opts, row, data[row])
        floors = products_alone(opts, tmp)
        for r in range(opts.rounds):
            for row in opts.models:
                for b, rate in torch_rates(opts, row, data[row], opts.batch).items():
                    torch[(row, b)].append(rate)
                for b in opts.batch:
                    amp1[(row, b)].append(amp_rate(opts, row, data[row], b, 1, tmp))
                    amp2[(row, b)].append(amp_rate(opts, row, data[row], b, 2, tmp))
                print(f"round {r + 1}/{opts.rounds}: {row} done", file=sys.stderr, flush=True)

    load_after = os.getloadavg()
    med = statistics.median
    print(f"Training instances/s, medians of {opts.rounds} alternating rounds; PyTorch 1 thread, its "
          f"hand-batched variant; Amp m in flight, an update every m; plain SGD")
    print()
    print("| model | m | PyTorch best | Amp, 1 worker | Amp / PyTorch | Amp 2 workers / 1 | products alone | goal below it |")
    print("|---|---|---|---|---|---|---|---|")
    for row in opts.models:
        label, variant = ROWS[row][0], ROWS[row][5]
        goal = 10 if row == "moe" else 2
        for b in opts.batch:
            t, a1, a2 = med(torch[(row, b)]), med(amp1[(row, b)]), med(amp2[(row, b)])
            f = floors[(row, b)]
            reach = f"yes ({goal}× = {fmt(goal * t)})" if f >= goal * t else f"no ({goal}× = {fmt(goal * t)})"
            print(f"| {label} | {b} | {fmt(t)} ({variant}) | {fmt(a1)} | **{a1 / t:.2f}×** | {a2 / a1:.2f}× "
                  f"| {fmt(f)} | {reach} |")
    print()
    print("load averages (1, 5, 15 min) before: " + ", ".join(f"{x:.2f}" for x in load_before)
          + "; after: " + ", ".join(f"{x:.2f}" for x in load_after))
    print("Every run (PyTorch / Amp 1 worker / Amp 2 workers):")
    for row in opts.models:
        for b in opts.batch:
            runs = [" ".join(fmt(x) for x in d[(row, b)]) for d in (torch, amp1, amp2)]
            print(f"  {row} m={b}: {' / '.join(runs)}")


if __name__ == "__main__":
    main()
