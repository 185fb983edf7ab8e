#!/usr/bin/env python3
"""Wall time to a target held-out accuracy, 1 and 2 workers, synchronous and asynchronous
(docs/learning.md, "Time to accuracy"): list-reduce 99% validation, GGSNN on molecules
70% test, the binary SST Tree-LSTM 80% dev. Each run is the model's recipe in
docs/learning.md with `--workers W` (2: the plan's layout, copies of the graph here) and,
for the asynchronous runs, `--async`; the update size and the instances in flight are the
recipe's. The time is the run's `elapsed_s` at the first held-out row at or above the
target (training and the held-out passes before it); "–" when the run never reached it.

    cargo build --release -p amprun
    AMP_DATA=... python3 docs/experiments/time_to_accuracy.py [--models list_reduce ggsnn sst] [--seeds 0 1]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AMPRUN = os.path.join(ROOT, "target", "release", "amprun")

CASES = {
    "list_reduce": (0.99, [
        "examples/list_reduce.amp", "--data", "examples/data/list_reduce.train.jsonl",
        "--valid", "examples/data/list_reduce.valid.jsonl", "--epochs", "24", "--optimizer", "adam",
        "--lr", "0.001", "--clip-norm", "1.0", "--min-update-frequency", "16"]),
    "ggsnn": (0.70, [
        "examples/ggsnn.amp", "-D", "classes=3", "-D", "edge_kinds=3", "--data", "molecules:train",
        "--valid", "molecules:test", "--epochs", "15", "--optimizer", "adam", "--lr", "0.002",
        "--clip-norm", "1.0", "--min-update-frequency", "16"]),
    "sst": (0.80, [
        "examples/tree_lstm_sst.amp", "-D", "classes=2", "--data", "{tmp}/train.binary.txt",
        "--valid", "{tmp}/dev.binary.txt", "--vocab", "{tmp}/binary.vocab", "--lowercase", "--optimizer", "adam",
        "--lr", "0.002", "--weight-decay", "1e-4", "--min-update-frequency", "25", "--epochs", "4"]),
}

MODES = {
    "1 worker, sync": ["--workers", "1"],
    "2 workers, sync": ["--workers", "2"],
    "1 worker, async": ["--workers", "1", "--async"],
    "2 workers, async": ["--workers", "2", "--async"],
}


def binary_sst(tmp):
    """The binary SST split of docs/learning.md (docs/experiments/sst/binary.py)."""
    for split in ("train", "dev"):
        path = subprocess.run([AMPRUN, "data", "path", f"sst:{split}"], capture_output=True, text=True,
                              check=True).stdout.strip()
        subprocess.run([sys.executable, os.path.join(ROOT, "docs/experiments/sst/binary.py"), path,
                        os.path.join(tmp, f"{split}.binary.txt")], check=True)


def reached(metrics, target):
    """(seconds, epoch) of the first held-out row at or above `target`, and the best accuracy."""
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    valid = [r for r in rows if r.get("split") == "valid"]
    best = max((r.get("accuracy", 0.0) for r in valid), default=0.0)
    for r in valid:
        if r.get("accuracy", 0.0) >= target:
            return (r["elapsed_s"], r["epoch"]), best
    return None, best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    opts = ap.parse_args()
    print("| model (target) | seed | " + " | ".join(MODES) + " | 2 workers / 1, sync | async |")
    print("|---|---|" + "---|" * (len(MODES) + 2))
    with tempfile.TemporaryDirectory() as tmp:
        if "sst" in opts.models:
            binary_sst(tmp)
        for model in opts.models:
            target, args = CASES[model]
            args = [a.replace("{tmp}", tmp) for a in args]
            for seed in opts.seeds:
                times, cells = {}, []
                for mode, extra in MODES.items():
                    metrics = os.path.join(tmp, "m.jsonl")
                    if os.path.exists(metrics):
                        os.remove(metrics)
                    cmd = [AMPRUN, "train", *args, *extra, "--seed", str(seed), "--metrics", metrics]
                    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                    if done.returncode != 0:
                        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-800:]}")
                    hit, best = reached(metrics, target)
                    times[mode] = hit[0] if hit else None
                    cells.append(f"{hit[0]:.1f} s (epoch {hit[1]})" if hit else f"– (best {100 * best:.1f}%)")

                def ratio(a, b):
                    return f"{times[b] / times[a]:.2f}×" if times[a] and times[b] else "–"

                print(f"| {model} ({100 * target:.0f}%) | {seed} | " + " | ".join(cells) + " | "
                      + ratio("1 worker, sync", "2 workers, sync") + " | "
                      + ratio("1 worker, async", "2 workers, async") + " |", flush=True)


if __name__ == "__main__":
    main()
