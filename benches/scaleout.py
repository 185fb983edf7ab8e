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

`--messages` measures the boundary alone: messages/s and bytes/s between two processes on
the MLP without the JIT, dealt round-robin over 2 workers (each edge between its nodes
in the chain crosses), 64 instances in flight, asynchronous updates every 64; beside it
the same run in one process, where the same messages pass between the two workers in
memory (its messages/s: its instances/s times the messages per instance that the split
run counted). The split run's counts are process 0's metrics `network` (all the traffic,
with two processes); the messages one process handles per instance come from a short
traced run, so the share of them that crosses is printed too. Each run's rates are over
its epochs after the first; medians (and ranges) of `--repeats` alternating runs:

    python3 benches/scaleout.py target/release/amprun --messages [--limit N] [--repeats R]
"""
import argparse
import json
import os
import statistics
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


# `--messages`: a chain of nodes dealt out in turn, many instances in flight.
MESSAGES_MODEL = "mlp"
MESSAGES_ARGS = ["--no-jit", "--workers", "2", "--plan", "round-robin", "--max-active-keys", "64", "--async",
                 "--min-update-frequency", "64", "--optimizer", "sgd", "--lr", "0.01"]


def train_rows(amprun, args, tmp, name, extra=()):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [amprun, "train", *args, "--metrics", metrics, *extra]
    done = subprocess.run(cmd, cwd=end_to_end.ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-800:]}")
    with open(metrics) as f:
        return [r for r in (json.loads(line) for line in f if line.strip()) if r.get("split") == "train"]


def seconds(row):
    """An epoch's training time, from its metrics."""
    return row["instances"] / row["instances_per_s"]


def handled_per_instance(amprun, args, tmp):
    """Messages one process handles per instance (forward and backward), from a trace."""
    trace = os.path.join(tmp, "messages.trace.json")
    short = [a for a in args] + ["--limit", "64", "--epochs", "1", "--trace", trace]
    rows = train_rows(amprun, short, tmp, "traced")
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    handled = sum(e["args"]["batch"] for e in events if e.get("cat") in ("forward", "backward"))
    return handled / rows[-1]["instances"]


def messages(amprun, opts):
    base, _ = end_to_end.CASES[MESSAGES_MODEL]
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("{tmp}", tmp) for a in base] + MESSAGES_ARGS
        args_limited = args + ["--limit", opts.limit, "--epochs", opts.epochs]
        one_rates, split_rates, msg_rates, byte_rates, per_instance = [], [], [], [], []
        for _ in range(int(opts.repeats)):
            # Every epoch but the first (warming up), as one stretch: an epoch alone is
            # tens of milliseconds here, too short for a rate on a shared machine.
            one = train_rows(amprun, args_limited, tmp, "one")[1:]
            one_rates.append(sum(r["instances"] for r in one) / sum(seconds(r) for r in one))
            split = train_rows(amprun, args_limited, tmp, "split", ["--processes", "2"])[1:]
            took = sum(seconds(r) for r in split)
            instances = sum(r["instances"] for r in split)
            crossed = sum(r["network"]["messages_sent"] + r["network"]["messages_received"] for r in split)
            moved = sum(r["network"]["bytes_sent"] + r["network"]["bytes_received"] for r in split)
            split_rates.append(instances / took)
            msg_rates.append(crossed / took)
            byte_rates.append(moved / took)
            per_instance.append(crossed / instances)
        handled = handled_per_instance(amprun, args, tmp)
    per = statistics.median(per_instance)
    one_rate, split_rate = statistics.median(one_rates), statistics.median(split_rates)
    print(f"model {MESSAGES_MODEL}, {' '.join(MESSAGES_ARGS)}, --limit {opts.limit} --epochs {opts.epochs}; "
          f"medians of {opts.repeats} runs (every epoch after the first)")
    print(f"messages per instance: {per:.1f} cross processes, of {handled:.1f} handled in one process")
    print("| run | instances/s (range) | messages/s between the workers | bytes/s between the processes |")
    print("|---|---|---|---|")
    spread = lambda xs: f"{min(xs):.0f}-{max(xs):.0f}"  # noqa: E731
    print(f"| 1 process x 2 workers (in memory) | {one_rate:.0f} ({spread(one_rates)}) | "
          f"{one_rate * per:.0f} | - |")
    print(f"| 2 processes x 1 worker (loopback TCP) | {split_rate:.0f} ({spread(split_rates)}) | "
          f"{statistics.median(msg_rates):.0f} ({spread(msg_rates)}) | "
          f"{statistics.median(byte_rates):.0f} ({spread(byte_rates)}) |")
    ratios = [o / s for o, s in zip(one_rates, split_rates)]
    print(f"one process / two, run by run: median {statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f}x)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("amprun")
    parser.add_argument("--limit", default="500")
    parser.add_argument("--epochs", default="2")
    parser.add_argument("--messages", action="store_true", help="messages/s and bytes/s across two processes")
    parser.add_argument("--repeats", default="5")
    opts = parser.parse_args()
    amprun = os.path.abspath(opts.amprun)
    if opts.messages:
        messages(amprun, opts)
        return
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
