#!/usr/bin/env python3
"""The cost of the process boundary: training throughput of each `end_to_end.py` case on
1 process x 2 workers against 2 processes x 1 worker (`--processes 2`, loopback), with the
same plan (`--plan round-robin`, so that both runs cut the same edges), synchronous and
with 8 instances in flight, and the two runs' epoch losses side by side (they must agree
to rounding). Run it on a release build, on an otherwise idle machine:

    cargo build --release -p amprun
    python3 benches/scaleout.py target/release/amprun [--limit N] [--epochs E]

On more hosts, the same command lines with `--process I --hostfile FILE --cluster-key
FILE` (docs/distributed.md) measure the real points.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import end_to_end  # noqa: E402  (the cases: model, data, limits)

SPLITS = {"1 process x 2 workers": [], "2 processes x 1 worker": ["--processes", "2"]}


def run(amprun, args, extra, tmp, name):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [amprun, "train", *args, "--workers", "2", "--plan", "round-robin", "--max-active-keys", "8",
           "--min-update-frequency", "8", "--metrics", metrics, *extra]
    done = subprocess.run(cmd, cwd=end_to_end.ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return None, done.stderr[-400:]
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    train = [r for r in rows if r.get("split") == "train"]
    return ([r["loss"] for r in train], [r["instances_per_s"] for r in train]), None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("amprun")
    parser.add_argument("--limit", default="500")
    parser.add_argument("--epochs", default="2")
    opts = parser.parse_args()
    amprun = os.path.abspath(opts.amprun)
    print("| model | split | instances/s (last epoch) | epoch losses |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model, (args, _) in end_to_end.CASES.items():
            args = [a.replace("{tmp}", tmp) for a in args] + ["--limit", opts.limit, "--epochs", opts.epochs]
            for split, extra in SPLITS.items():
                result, error = run(amprun, args, extra, tmp, model)
                if result is None:
                    print(f"| {model} | {split} | failed: {error.strip().splitlines()[-1:]} | |")
                    continue
                losses, rates = result
                print(f"| {model} | {split} | {rates[-1]:.0f} | {', '.join(f'{l:.5f}' for l in losses)} |")


if __name__ == "__main__":
    main()
