#!/usr/bin/env python3
"""Amp beside PyTorch on the same cores (issue 41): for every canonical model and
minibatch m, training instances/s of

- PyTorch, 1 thread (each script's hand-batched variant, as `table.py`);
- PyTorch with N intra-op threads (`--threads N`);
- PyTorch DistributedDataParallel on the CPU: N processes, gloo over loopback, 1 thread
  each, each training its share of the same global minibatch (`--ddp N`; not Tree-LSTM,
  whose script has its own training loop);
- Amp with 1 worker and with N workers (the plan's layout: copies of the graph × stages),
  m in flight and an update every m, asynchronous, plain SGD at 0.01;

and Amp N workers over the better PyTorch N-core variant. Medians of `--rounds`
alternating rounds.

    python3 benches/pytorch/cores.py --python /tmp/torchenv/bin/python [--cores 2] [--models mlp moe]
"""

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from table import DEFAULT_AMPRUN, ROWS, amp_rate, fmt, run, torch_rates  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="a Python with torch")
    ap.add_argument("--amprun", default=DEFAULT_AMPRUN, help=f"a release amprun (default {DEFAULT_AMPRUN})")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="N (default: this machine's cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 25, 64])
    ap.add_argument("--models", nargs="+", choices=list(ROWS), default=list(ROWS))
    opts = ap.parse_args()
    if not os.path.exists(opts.amprun):
        sys.exit(f"{opts.amprun} not found: cargo build --release -p amprun, or pass --amprun")
    n = opts.cores
    keys = [(r, b) for r in opts.models for b in opts.batch]
    cols = ["torch 1", f"torch {n} threads", f"torch DDP {n}", "amp 1", f"amp {n}"]
    runs = {c: {k: [] for k in keys} for c in cols}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for row in opts.models:
            kind, count = ROWS[row][1], ROWS[row][2]
            files[kind] = (os.path.join(tmp, f"{kind}.jsonl"), max(count, files.get(kind, (None, 0))[1]))
        for kind, (_, count) in files.items():
            run([sys.executable, os.path.join(HERE, "datasets.py"), tmp, "--models", kind, "--count", str(count)])
        data = {row: files[ROWS[row][1]][0] for row in opts.models}
        for r in range(opts.rounds):
            for row in opts.models:
                variants = [("torch 1", []), (f"torch {n} threads", ["--threads", str(n)])]
                if ROWS[row][3][0] != "tree_lstm.py":
                    variants.append((f"torch DDP {n}", ["--ddp", str(n)]))
                for col, extra in variants:
                    for b, rate in torch_rates(opts, row, data[row], opts.batch, extra).items():
                        runs[col][(row, b)].append(rate)
                for b in opts.batch:
                    runs["amp 1"][(row, b)].append(amp_rate(opts, row, data[row], b, 1, tmp))
                    runs[f"amp {n}"][(row, b)].append(amp_rate(opts, row, data[row], b, n, tmp))
                print(f"round {r + 1}/{opts.rounds}: {row} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    med = {c: {k: statistics.median(v) for k, v in d.items() if v} for c, d in runs.items()}
    print(f"Training instances/s on {n} cores, medians of {opts.rounds} alternating rounds; plain SGD 0.01, "
          f"minibatch m (Amp: m in flight, an update every m, asynchronous)")
    print()
    print("| model | m | " + " | ".join(f"{c}" for c in cols) + f" | Amp {n} / best PyTorch {n} | Amp {n} / 1 |")
    print("|" + "---|" * (len(cols) + 4))
    for row, b in keys:
        cells = [fmt(med[c][(row, b)]) if (row, b) in med[c] else "–" for c in cols]
        best = max(med[c].get((row, b), 0.0) for c in cols[1:3])
        amp_n, amp_1 = med[f"amp {n}"][(row, b)], med["amp 1"][(row, b)]
        print(f"| {ROWS[row][0]} | {b} | " + " | ".join(cells) + f" | **{amp_n / best:.2f}×** | {amp_n / amp_1:.2f}× |")
    print()
    print("load averages (1, 5, 15 min) before: " + ", ".join(f"{x:.2f}" for x in load_before)
          + "; after: " + ", ".join(f"{x:.2f}" for x in load_after))


if __name__ == "__main__":
    main()
