#!/usr/bin/env python3
"""Where a training step's time goes, per instance, for the canonical models: each run's
`--profile` `time` object (docs/amprun.md), its buckets grouped as below, in µs per
instance, for each m (instances in flight and the update size).

    cargo build --release -p amprun
    python3 benches/time_buckets.py                      # m = 8 and 64, every model
    python3 benches/time_buckets.py --m 8 25 64 --models ggsnn tree_lstm

The runs are `end_to_end.py`'s cases (the same data and limits): one worker, `--async`,
plain SGD, one epoch (`--epochs` more; the buckets sum over all of them). The profile
times every call (two clock reads each), which `between nodes` includes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import end_to_end  # noqa: E402  (the cases: model, data, limits)

# Buckets of the profile grouped into columns; kinds not named here go to "other nodes".
GROUPS = {
    "linear": ["linear"],
    "fused kernels": ["fused"],
    "row ops": ["gather_rows", "scatter_sum", "partition_rows", "merge_rows", "mask_rows", "embedding_rows",
                "gather", "reduce", "concat", "split", "embedding", "stack", "index"],
    "routing": ["chain", "phi", "cond", "switch", "isu", "select", "route"],
}
FIXED = ["between nodes", "updates", "waiting"]
COLUMNS = [*GROUPS, "other nodes", *FIXED]


def buckets(model, m, epochs, tmp, amprun):
    args, limit = end_to_end.CASES[model]
    args = [a.replace("{tmp}", tmp) for a in args]
    profile = os.path.join(tmp, f"{model}.{m}.profile.json")
    cmd = [amprun, "train", *args, "--limit", str(limit), "--epochs", str(epochs), "--max-active-keys", str(m),
           "--async", "--min-update-frequency", str(m), "--optimizer", "sgd", "--lr", "0.01", "--workers", "1",
           "--profile", profile]
    done = subprocess.run(cmd, cwd=end_to_end.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    with open(profile) as f:
        time = json.load(f)["time"]
    columns = dict.fromkeys(COLUMNS, 0.0)
    for b in time["buckets"]:
        name = b["bucket"]
        group = next((g for g, kinds in GROUPS.items() if name in kinds), None)
        group = group or (name if name in FIXED else "other nodes")
        columns[group] += b["us_per_instance"]
    return columns, time["instances"] / time["wall_s"] if time["wall_s"] > 0 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(end_to_end.CASES), choices=list(end_to_end.CASES))
    parser.add_argument("--m", nargs="+", type=int, default=[8, 64])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--amprun", default=end_to_end.AMPRUN)
    opts = parser.parse_args()
    print("µs per instance, one worker; `total` is their sum, `rate` the profiled run's instances/s")
    print(f"| model | m | {' | '.join(COLUMNS)} | total | rate |")
    print("|---|---|" + "---|" * (len(COLUMNS) + 2))
    with tempfile.TemporaryDirectory() as tmp:
        for model in opts.models:
            for m in opts.m:
                columns, rate = buckets(model, m, opts.epochs, tmp, os.path.abspath(opts.amprun))
                cells = " | ".join(f"{v:.1f}" for v in columns.values())
                print(f"| {model} | {m} | {cells} | {sum(columns.values()):.1f} | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
