#!/usr/bin/env python3
"""The data the PyTorch baselines and `amprun` both train on, as Amp's JSON Lines, written
into one folder (seeded: the same bytes on every machine and every run):

| file | model | instances |
|---|---|---|
| `mlp.jsonl` | `examples/mlp.amp` | the digits of `data/digits/digits.csv`, pixels times 0.0625 (amprun's `--scale 0.0625`) |
| `list_reduce.jsonl` | `examples/list_reduce.amp` | `examples/data/list_reduce.train.jsonl` |
| `moe.jsonl` | `examples/moe.amp` | `examples/data/moe.train.jsonl` |
| `tree_lstm.jsonl` | `examples/tree_lstm.amp` | random binary trees: 5-50 leaves (uniform), uniform random split points, words uniform over 5,000, labels uniform over 5 (the generator of `tree_lstm.py`); a tree deeper than 40 is drawn again (JSON Lines reads trees about 60 deep at most) |
| `ggsnn.jsonl` | `examples/ggsnn.amp` | random graphs: 10-30 nodes (uniform), kinds uniform over 8; bonds: a random spanning tree (node i to a uniform earlier node) plus n/2 random extra pairs, each bond of a uniform kind of 2 and written as two directed edges; label 1 when kind-1 bonds outnumber kind-0 bonds, else 0 |

Each file holds `--count` instances (default 2,000), cycling through the source file where
it has fewer.

    python3 benches/pytorch/datasets.py OUT_DIR [--count 2000] [--count-of tree_lstm=1000 ...]
"""

import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(ROOT, "data", "digits", "digits.csv")
MODELS = ["mlp", "list_reduce", "moe", "tree_lstm", "ggsnn"]
MAX_TREE_DEPTH = 40


def cycle(items, count):
    return [items[i % len(items)] for i in range(count)]


def jsonl_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def digits(count):
    rows = []
    with open(DIGITS, encoding="utf-8") as f:
        for line in f:
            cells = line.strip().split(",")
            if len(cells) != 65:
                continue
            rows.append({"pixels": [float(c) * 0.0625 for c in cells[:64]], "label": int(cells[64])})
    return cycle(rows, count)


def random_tree(rng, vocab=5000, classes=5, min_leaves=5, max_leaves=50):
    """Amp's `Tree` enum in JSON (externally tagged) and its depth."""

    def build(n):
        if n == 1:
            return {"Leaf": {"word": rng.randrange(vocab), "label": rng.randrange(classes)}}, 0
        k = rng.randint(1, n - 1)
        left, dl = build(k)
        right, dr = build(n - k)
        return {"Node": {"left": left, "right": right, "label": rng.randrange(classes)}}, 1 + max(dl, dr)

    while True:
        tree, depth = build(rng.randint(min_leaves, max_leaves))
        if depth <= MAX_TREE_DEPTH:
            return {"tree": tree, "label": rng.randrange(classes)}


def random_graph(rng, kinds=8, edge_kinds=2, min_nodes=10, max_nodes=30):
    n = rng.randint(min_nodes, max_nodes)
    bonds = [(i, rng.randrange(i)) for i in range(1, n)]
    for _ in range(n // 2):
        a, b = rng.sample(range(n), 2)
        bonds.append((a, b))
    edges, per_kind = [], [0] * edge_kinds
    for a, b in bonds:
        kind = rng.randrange(edge_kinds)
        per_kind[kind] += 1
        edges.append({"src": a, "dst": b, "kind": kind})
        edges.append({"src": b, "dst": a, "kind": kind})
    label = 1 if per_kind[1] > per_kind[0] else 0
    return {"nodes": [rng.randrange(kinds) for _ in range(n)], "edges": edges, "label": label}


def make(model, count, seed=0):
    if model == "mlp":
        return digits(count)
    if model == "list_reduce":
        return cycle(jsonl_lines(os.path.join(ROOT, "examples", "data", "list_reduce.train.jsonl")), count)
    if model == "moe":
        return cycle(jsonl_lines(os.path.join(ROOT, "examples", "data", "moe.train.jsonl")), count)
    rng = random.Random(seed)
    if model == "tree_lstm":
        return [random_tree(rng) for _ in range(count)]
    if model == "ggsnn":
        return [random_graph(rng) for _ in range(count)]
    raise ValueError(model)


def write(out_dir, model, count):
    path = os.path.join(out_dir, f"{model}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for obj in make(model, count):
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=2000, help="instances per file (default 2000)")
    ap.add_argument("--count-of", nargs="*", default=[], metavar="MODEL=N", help="another count for one model")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    args = ap.parse_args()
    counts = {m: args.count for m in MODELS}
    for item in args.count_of:
        model, _, n = item.partition("=")
        if model not in counts or not n.isdigit() or int(n) < 1:
            sys.exit(f"--count-of {item}: expected MODEL=N with MODEL one of {', '.join(MODELS)}")
        counts[model] = int(n)
    os.makedirs(args.out_dir, exist_ok=True)
    for m in args.models:
        print(write(args.out_dir, m, counts[m]))


if __name__ == "__main__":
    main()
