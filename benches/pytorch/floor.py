"""The products alone: how fast one thread could train each canonical model if it did
nothing but the model's Linear products, at PyTorch's own single-thread GEMM rate on this
machine, measured now.

    /tmp/torchenv/bin/python benches/pytorch/floor.py --data-dir DIR --batch 8 25 64

`DIR` holds `datasets.py`'s files. For each model and minibatch size m, the script counts
the rows each Linear layer sees per instance in the file (Tree-LSTM's leaves and inner
nodes, GGSNN's edges and nodes times 5 steps, list-reduce's tokens, MoE's top-2 experts),
times with `torch.mm` (1 thread, best of several repetitions) the forward, the input
gradient (where the input is not data) and the weight gradient of every layer at the rows
m instances give it, and prints the instances/s those products alone allow:

    floor MODEL m INSTANCES_PER_S

No executor can train faster than this with these GEMMs: everything else (elementwise
work, gathers, routing, updates) comes on top. Where it is below twice PyTorch's measured
rate, "2× PyTorch" asks for GEMMs faster than PyTorch's own. The weights are hot in the
cache here (MoE's experts are not in training), so for MoE it is a loose bound.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

STEPS = 5  # GGSNN's message-passing steps (examples/ggsnn.amp)
EXPERTS, TOP_K = 64, 2  # examples/moe.amp


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def tree_counts(t):
    """(leaves, inner nodes) of one `Tree` value, without recursion (trees may be deep)."""
    leaves = inner = 0
    stack = [t]
    while stack:
        node = stack.pop()
        if "Leaf" in node:
            leaves += 1
        else:
            inner += 1
            stack += [node["Node"]["left"], node["Node"]["right"]]
    return leaves, inner


def layers(model, data):
    """Each Linear layer of the model as (in, out, rows per mean instance, whether its input
    needs a gradient). The products of m instances are taken as one call of m times as
    many rows; MoE's experts are in `floor`."""
    mean = statistics.fmean
    if model == "mlp":
        return [(64, 128, 1.0, False), (128, 128, 1.0, True), (128, 10, 1.0, True)]
    if model == "list_reduce":
        tokens = mean(len(x["tokens"]) for x in data)
        return [(256, 128, tokens, True), (128, 10, 1.0, True)]
    if model == "tree_lstm":
        counts = [tree_counts(x["tree"]) for x in data]
        leaves, inner = mean(c[0] for c in counts), mean(c[1] for c in counts)
        return [(300, 450, leaves, True), (300, 750, inner, True), (150, 5, 1.0, True)]
    if model.startswith("ggsnn"):
        h = int(model[len("ggsnn"):])
        nodes = mean(len(x["nodes"]) for x in data)
        edges = mean(len(x["edges"]) for x in data)
        # Two edge kinds, one message Linear each; the GRU's two products per node.
        return [(h, h, STEPS * edges / 2, True), (h, h, STEPS * edges / 2, True),
                (h, 3 * h, STEPS * nodes, True), (h, 3 * h, STEPS * nodes, True), (h, 2, 1.0, True)]
    if model == "moe":
        return [(256, 64, 1.0, False), (256, 10, 1.0, True)]
    raise ValueError(model)


def seconds(fn, budget=0.15):
    """Best time of one call of `fn` over `budget` seconds of repetitions."""
    fn()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < budget:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def products(inp, out, rows, input_grad):
    """Seconds of one layer's forward, input gradient and weight gradient at `rows` rows."""
    x, w, dy = torch.randn(rows, inp), torch.randn(out, inp), torch.randn(rows, out)
    total = seconds(lambda: x @ w.t()) + seconds(lambda: dy.t() @ x)
    if input_grad:
        total += seconds(lambda: dy @ w)
    return total


def floor(model, data, m):
    """Instances/s of m instances' Linear products, one thread."""
    total = sum(products(inp, out, max(1, round(rows * m)), grad) for inp, out, rows, grad in layers(model, data))
    if model == "moe":
        # Each instance's top-2 experts, Mlp(256, 256, 256): the m·k rows of a minibatch
        # fall on the experts it touches, about E = 64·(1 − (1 − 1/64)^(m·k)) of them.
        touched = EXPERTS * (1 - (1 - 1 / EXPERTS) ** (m * TOP_K))
        rows = max(1, round(m * TOP_K / touched))
        per_expert = products(256, 256, rows, False) + products(256, 256, rows, True)
        total += touched * per_expert
    return m / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True, help="the folder of datasets.py's files")
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 25, 64])
    ap.add_argument("--models", nargs="+", default=["ggsnn32", "ggsnn128", "tree_lstm", "list_reduce", "moe", "mlp"])
    opts = ap.parse_args()
    torch.set_num_threads(1)
    for model in opts.models:
        kind = "ggsnn" if model.startswith("ggsnn") else model
        path = os.path.join(opts.data_dir, f"{kind}.jsonl")
        if not os.path.exists(path):
            sys.exit(f"{path} not found: run datasets.py {opts.data_dir} first")
        data = read(path)
        for m in opts.batch:
            print(f"floor {model} {m} {floor(model, data, m):.1f}", flush=True)


if __name__ == "__main__":
    main()
