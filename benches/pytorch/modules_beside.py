#!/usr/bin/env python3
"""Module-network training throughput: Amp beside the IEP execution engine's two methods,
in one run.

    cargo build --release -p amprun
    python3 benches/pytorch/modules_beside.py --python /tmp/torchenv/bin/python [--rounds 3]

For `--rounds` rounds, alternates at each minibatch size m of `--batch` (default 8 25 64
128 256): `module_network.py --strategy levels` (the dynamic-batching seed's grouping by
height and module) and `--strategy recursive` (the original per-program loop), 1 thread,
plain SGD lr 0.01; then `amprun train examples/module_network.amp` on the same file and
the same number of instances, one epoch, with m instances in flight and an update every m
(`--max-active-keys m --async --min-update-frequency m`, plain SGD lr 0.01), on 1 worker
and on `--workers` workers. Prints the median training instances/s of each and the ratios:
Amp 1 worker over the seed's method, the seed's method over the per-program loop (its own
claim: over 10×), Amp 1 worker over the loop, and Amp on all workers over 1. The ratios of
one run on a shared machine are noisy: the load averages are printed beside them.
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
DEFAULT_AMPRUN = os.path.join(ROOT, "target", "release", "amprun")
DATA = os.path.join(ROOT, "examples", "data", "programs.train.jsonl")


def run(cmd):
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def torch_rates(opts, strategy, instances):
    """{m: training instances/s} of one PyTorch run over every minibatch size."""
    out = run([opts.python, os.path.join(HERE, "module_network.py"), "--data", opts.data, "--strategy", strategy,
               "--instances", str(instances), "--warmup", "200", "--batch", *map(str, opts.batch)])
    rates = {}
    for line in out.splitlines():
        m = re.match(r"train \S+ \S+ (\d+) ([\d.]+)", line)
        if m:
            rates[int(m.group(1))] = float(m.group(2))
    if set(rates) != set(opts.batch):
        sys.exit(f"module_network.py --strategy {strategy}: expected a rate per batch size, got {rates}")
    return rates


def amp_rate(opts, batch, workers, tmp):
    metrics = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run([opts.amprun, "train", "examples/module_network.amp", "--data", opts.data, "--limit", str(opts.instances),
         "--epochs", "1", "--workers", str(workers), "--max-active-keys", str(batch), "--async",
         "--min-update-frequency", str(batch), "--optimizer", "sgd", "--lr", "0.01", "--metrics", metrics])
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("split") == "train"][-1]["instances_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="a Python with torch")
    ap.add_argument("--amprun", default=DEFAULT_AMPRUN)
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 25, 64, 128, 256])
    ap.add_argument("--instances", type=int, default=5000, help="instances timed per run (default 5000)")
    ap.add_argument("--recursive-instances", type=int, default=1000,
                    help="instances the per-program loop times (default 1000: it is slow)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="Amp's second setting (default: every core)")
    opts = ap.parse_args()
    if not os.path.exists(opts.amprun):
        sys.exit(f"{opts.amprun} not found: cargo build --release -p amprun, or pass --amprun")

    load_before = os.getloadavg()
    series = {k: {b: [] for b in opts.batch} for k in ("levels", "recursive", "amp1", "ampn")}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.rounds):
            for b, rate in torch_rates(opts, "levels", opts.instances).items():
                series["levels"][b].append(rate)
            for b, rate in torch_rates(opts, "recursive", opts.recursive_instances).items():
                series["recursive"][b].append(rate)
            for b in opts.batch:
                series["amp1"][b].append(amp_rate(opts, b, 1, tmp))
                series["ampn"][b].append(amp_rate(opts, b, opts.workers, tmp))
            print(f"round {r + 1}/{opts.rounds} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    med = {k: {b: statistics.median(v) for b, v in s.items()} for k, s in series.items()}
    print(f"Module network (hidden 64, programs of 1-6 operations), training instances/s, medians of "
          f"{opts.rounds} alternating rounds; PyTorch 1 thread; Amp m in flight, an update every m; plain SGD")
    print()
    print(f"| m | per-program loop | seed's batching | Amp, 1 worker | Amp / seed | seed / loop | Amp / loop "
          f"| Amp, {opts.workers} workers | {opts.workers} / 1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in opts.batch:
        loop, seed, a1, an = med["recursive"][b], med["levels"][b], med["amp1"][b], med["ampn"][b]
        print(f"| {b} | {loop:,.0f} | {seed:,.0f} | {a1:,.0f} | **{a1 / seed:.2f}×** | {seed / loop:.2f}× "
              f"| {a1 / loop:.2f}× | {an:,.0f} | {an / a1:.2f}× |")
    print()
    print("load averages (1, 5, 15 min) before: " + ", ".join(f"{x:.2f}" for x in load_before)
          + "; after: " + ", ".join(f"{x:.2f}" for x in load_after))
    print("Every run (loop / seed / Amp 1 worker / Amp all workers):")
    for b in opts.batch:
        runs = [" ".join(f"{x:,.0f}" for x in series[k][b]) for k in ("recursive", "levels", "amp1", "ampn")]
        print(f"  m={b}: {' / '.join(runs)}")


if __name__ == "__main__":
    main()
