#!/usr/bin/env python3
"""Hand-batched PyTorch baseline for Amp's binary Tree-LSTM (`examples/tree_lstm.amp`).

The model is Amp's exactly (Tai et al. 2015, binary/N-ary variant), with the same
`state_dict` names and PyTorch's default initialisation (which Amp also uses):

    emb    = Embedding(vocab=5000, embed=300)
    leaf   = Linear(300, 3*150)    leaf:   [i, o, u] = split(leaf(emb(word)), 3)
                                           c = sigmoid(i)*tanh(u);  h = sigmoid(o)*tanh(c)
    branch = Linear(2*150, 5*150)  branch: [i, fl, fr, o, u] = split(branch([h_l, h_r]), 5)
                                           c = sigmoid(i)*tanh(u) + sigmoid(fl)*c_l + sigmoid(fr)*c_r
                                           h = sigmoid(o)*tanh(c)
    head   = Linear(150, 5)        loss:   cross_entropy(head(h_root), root label), mean over
                                           the minibatch (root only: node labels are unused)

Two ways to run a minibatch of trees:

  levels     hand batching: the nodes of all trees of the minibatch grouped by height
             (leaves at level 0, a node's level = 1 + max child level); all leaves as one
             embedding lookup + one matmul, then each level as one gather of the children's
             h and c by index + one matmul + elementwise ops; one head matmul and one loss
             for the minibatch. The index bookkeeping (in Python) is inside the timed loop.
  recursive  per instance: the recursion as one writes it for a single tree, one node at a
             time (batch B then means B trees' losses averaged before one backward/step).

Training = forward + backward + optimizer step per minibatch (Adam lr 0.002 by default, as
in docs/learning.md; `--optimizer sgd --lr 0.01` is amprun's default; the fused CPU
optimizer kernel unless `--optimizer-impl` says otherwise); inference =
forward only under torch.no_grad(). Each (strategy, batch) pair starts from the same
seeded initialisation, warms up on `--warmup` trees, then times `--trees` trees.

GFLOP/s counts only the matmuls of the Linear layers: forward 2*m*k*n per layer call
(leaf: 2*300*450 per leaf, branch: 2*300*750 per internal node, head: 2*150*5 per tree),
training three times the forward (backward = input and weight gradients, twice the
forward). Elementwise ops, gathers, the embedding and the optimizer are not counted.

usage:
    python3 benches/pytorch/tree_lstm.py                       # random trees, 5-50 leaves
    python3 benches/pytorch/tree_lstm.py --sst "$(amprun data path sst:train)"
    python3 benches/pytorch/tree_lstm.py --threads 2 --batch 1 25 100 --trees 4000
    python3 benches/pytorch/tree_lstm.py --strategy levels --batch 25 --optimizer sgd --lr 0.01
    python3 benches/pytorch/tree_lstm.py --data /tmp/ampdata/tree_lstm.jsonl   # Amp's JSON Lines trees
    python3 benches/pytorch/tree_lstm.py --data /tmp/ampdata/tree_lstm.jsonl --check   # against amprun grad

Only torch and the standard library are needed.
"""

import argparse
import collections
import json
import random
import re
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # numpy is not needed
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402  (beside this script)

UNK = "<unk>"


# ---------------------------------------------------------------------------------------
# Trees: a tree is a list of nodes in post-order (children before parents, root last).
# A node is (level, word, left, right): a leaf has word >= 0 and left = right = -1, an
# internal node has word = -1 and the positions of its children in the same list.
# ---------------------------------------------------------------------------------------
class Tree:
    __slots__ = ("nodes", "label", "leaves")

    def __init__(self, nodes, label):
        self.nodes = nodes
        self.label = label
        self.leaves = sum(1 for n in nodes if n[1] >= 0)


def random_tree(rng, min_leaves, max_leaves, vocab, classes):
    """A random binary tree: a uniform leaf count, uniform random split points."""
    nodes = []

    def build(n):  # returns (position, level); iterative depth is at most 50
        if n == 1:
            nodes.append((0, rng.randrange(vocab), -1, -1))
            return len(nodes) - 1, 0
        k = rng.randint(1, n - 1)
        left, ll = build(k)
        right, lr = build(n - k)
        level = 1 + max(ll, lr)
        nodes.append((level, -1, left, right))
        return len(nodes) - 1, level

    build(rng.randint(min_leaves, max_leaves))
    return Tree(nodes, rng.randrange(classes))


def json_tree(obj):
    """Amp's JSON Lines form of `record Sentence { tree: Tree, label: int }` (the enum
    externally tagged: `{"Leaf": {"word": 3, "label": 2}}`, `{"Node": {"left": ..., "right":
    ..., "label": 1}}`) -> Tree. Node labels are unused, as in Amp's loss."""
    nodes = []

    def build(t):
        if "Leaf" in t:
            nodes.append((0, t["Leaf"]["word"], -1, -1))
            return len(nodes) - 1, 0
        body = t["Node"]
        left, ll = build(body["left"])
        right, lr = build(body["right"])
        level = 1 + max(ll, lr)
        nodes.append((level, -1, left, right))
        return len(nodes) - 1, level

    build(obj["tree"])
    return Tree(nodes, obj["label"])


def read_json_trees(path):
    with open(path, encoding="utf-8") as f:
        return [json_tree(json.loads(line)) for line in f if line.strip()]


def amp_spec():
    """This model for `common.amp_check`: the levels strategy against `amprun grad`."""
    def loss(model, batch):
        return F.cross_entropy(model.forward_levels(batch), torch.tensor([t.label for t in batch]))

    return common.Spec(
        "tree_lstm",
        lambda a: TreeLstm(a.vocab, a.embed, a.hidden, a.classes),
        lambda objects, a: [json_tree(o) for o in objects],
        loss,
        lambda a: ["examples/tree_lstm.amp", "-D", f"vocab={a.vocab}", "-D", f"embed={a.embed}",
                   "-D", f"hidden={a.hidden}", "-D", f"classes={a.classes}"],
        strategy="levels",
    )


def parse_ptb(line):
    """`(3 (2 The) (2 Rock))` -> (label, children or word), nested."""
    # ASCII whitespace only, as Amp's reader: a word may hold a non-breaking space (`8 1\/2`).
    tokens = re.findall(r"[()]|[^\s()]+", line, flags=re.ASCII)
    pos = 0

    def node():
        nonlocal pos
        if tokens[pos] != "(":
            raise ValueError(f"expected '(' at token {pos}")
        label = int(tokens[pos + 1])
        pos += 2
        if tokens[pos] not in ("(", ")"):  # a leaf: (label word)
            word = tokens[pos]
            pos += 2  # the word and ')'
            return (label, word)
        children = []
        while tokens[pos] == "(":
            children.append(node())
        pos += 1  # ')'
        return (label, children)

    return node()


def read_sst(path):
    with open(path, encoding="utf-8") as f:
        return [parse_ptb(line) for line in f if line.strip()]


def sst_vocab(raw_trees, size):
    """Amp's rule: `<unk>` first, then the most frequent words (ties: first appearance),
    `size` words in all."""
    counts = collections.Counter()
    first = {}

    def walk(t):
        if isinstance(t[1], str):
            counts[t[1]] += 1
            first.setdefault(t[1], len(first))
        else:
            for c in t[1]:
                walk(c)

    for t in raw_trees:
        walk(t)
    ranked = sorted(counts, key=lambda w: (-counts[w], first[w]))
    return {w: i for i, w in enumerate([UNK] + [w for w in ranked if w != UNK][: size - 1])}


def sst_tree(raw, vocab):
    nodes = []

    def build(t):
        label, body = t
        if isinstance(body, str):
            nodes.append((0, vocab.get(body, 0), -1, -1))
            return len(nodes) - 1, 0
        if len(body) != 2:
            raise ValueError(f"not a binary tree: a node with {len(body)} subtrees")
        left, ll = build(body[0])
        right, lr = build(body[1])
        level = 1 + max(ll, lr)
        nodes.append((level, -1, left, right))
        return len(nodes) - 1, level

    build(raw)
    return Tree(nodes, raw[0])


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------
class TreeLstm(nn.Module):
    def __init__(self, vocab=5000, embed=300, hidden=150, classes=5):
        super().__init__()
        self.hidden = hidden
        self.emb = nn.Embedding(vocab, embed)  # N(0, 1), as Amp
        self.leaf = nn.Linear(embed, 3 * hidden)  # U(+-1/sqrt(fan_in)), as Amp
        self.branch = nn.Linear(2 * hidden, 5 * hidden)
        self.head = nn.Linear(hidden, classes)

    # -- level by level, the whole minibatch at once --------------------------------------
    def forward_levels(self, batch):
        """Logits (B, classes) of a minibatch of trees, one batched op per level."""
        # Slots: the nodes of all trees ordered by level, so each level is a contiguous
        # range of rows of the h and c buffers and its children lie in earlier rows.
        per_level = collections.Counter()
        for t in batch:
            for n in t.nodes:
                per_level[n[0]] += 1
        height = max(per_level) + 1
        offset = [0] * (height + 1)
        for lv in range(height):
            offset[lv + 1] = offset[lv] + per_level[lv]
        fill = offset[:height]
        words = [0] * per_level[0]
        children = [[0] * (2 * per_level[lv]) for lv in range(height)]  # [l0, r0, l1, r1, ...]
        roots = []
        for t in batch:
            slot = [0] * len(t.nodes)
            for j, (lv, word, left, right) in enumerate(t.nodes):
                s = fill[lv]
                fill[lv] = s + 1
                slot[j] = s
                if lv == 0:
                    words[s] = word
                else:
                    r = 2 * (s - offset[lv])
                    children[lv][r] = slot[left]
                    children[lv][r + 1] = slot[right]
            roots.append(slot[-1])

        hd = self.hidden
        n_nodes = offset[height]
        # Leaves: one lookup, one matmul.
        i, o, u = self.leaf(self.emb(torch.tensor(words))).chunk(3, dim=1)
        c0 = torch.sigmoid(i) * torch.tanh(u)
        h0 = torch.sigmoid(o) * torch.tanh(c0)
        if height == 1:
            h_all = h0
        else:
            h_all = h0.new_empty(n_nodes, hd)
            c_all = h0.new_empty(n_nodes, hd)
            h_all[: offset[1]] = h0
            c_all[: offset[1]] = c0
            for lv in range(1, height):
                lo, hi = offset[lv], offset[lv + 1]
                idx = torch.tensor(children[lv])
                x = h_all.index_select(0, idx).view(hi - lo, 2 * hd)  # concat(h_l, h_r)
                cc = c_all.index_select(0, idx).view(hi - lo, 2, hd)
                i, fl, fr, o, u = self.branch(x).chunk(5, dim=1)
                c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cc[:, 0] + torch.sigmoid(fr) * cc[:, 1]
                h_all[lo:hi] = torch.sigmoid(o) * torch.tanh(c)
                c_all[lo:hi] = c
        return self.head(h_all.index_select(0, torch.tensor(roots)))

    # -- one tree, one node at a time --------------------------------------------------------
    def forward_recursive(self, tree):
        """Logits (1, classes) of one tree, node by node as in the Amp source."""
        state = [None] * len(tree.nodes)
        for j, (_, word, left, right) in enumerate(tree.nodes):  # post-order = recursion order
            if word >= 0:
                i, o, u = self.leaf(self.emb(torch.tensor([word]))).chunk(3, dim=1)
                c = torch.sigmoid(i) * torch.tanh(u)
            else:
                (hl, cl), (hr, cr) = state[left], state[right]
                i, fl, fr, o, u = self.branch(torch.cat([hl, hr], dim=1)).chunk(5, dim=1)
                c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
            state[j] = (torch.sigmoid(o) * torch.tanh(c), c)
        return self.head(state[-1][0])

    def logits(self, batch, strategy):
        if strategy == "levels":
            return self.forward_levels(batch)
        return torch.cat([self.forward_recursive(t) for t in batch])


def forward_flops(tree, embed, hidden, classes):
    """Matmul FLOPs of one tree's forward pass (2*m*k*n per Linear call)."""
    internal = len(tree.nodes) - tree.leaves
    return 2 * (tree.leaves * embed * 3 * hidden + internal * 2 * hidden * 5 * hidden + hidden * classes)


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------
def make_optimizer(args, model):
    """Adam or SGD; `fused` (the default) is PyTorch's fused CPU kernel (torch >= 2.4), the
    fastest here; `default` is what PyTorch picks when not told (the per-tensor loop on CPU)."""
    impl = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[args.optimizer_impl]
    cls, lr = (torch.optim.Adam, 0.002) if args.optimizer == "adam" else (torch.optim.SGD, 0.01)
    lr = args.lr if args.lr is not None else lr
    try:
        return cls(model.parameters(), lr=lr, **impl)
    except (RuntimeError, ValueError, TypeError) as e:  # an older torch without fused CPU kernels
        print(f"warning: {args.optimizer_impl} {args.optimizer} unavailable ({e}); using the default", file=sys.stderr)
        args.optimizer_impl = "default"
        return cls(model.parameters(), lr=lr)


def train(model, opt, mbs, strategy):
    losses = 0.0
    for mb in mbs:
        labels = torch.tensor([t.label for t in mb])
        loss = F.cross_entropy(model.logits(mb, strategy), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses += loss.item()
    return losses / max(len(mbs), 1)


@torch.no_grad()
def infer(model, mbs, strategy):
    correct = 0
    for mb in mbs:
        pred = model.logits(mb, strategy).argmax(dim=1)
        correct += sum(int(p) == t.label for p, t in zip(pred.tolist(), mb))
    return correct


def check(trees, args):
    """The two strategies agree: the same loss and gradients on a few trees."""
    grads = []
    for strategy in ("levels", "recursive"):
        torch.manual_seed(args.seed)
        model = TreeLstm(args.vocab, args.embed, args.hidden, args.classes)
        mb = trees[:8]
        loss = F.cross_entropy(model.logits(mb, strategy), torch.tensor([t.label for t in mb]))
        loss.backward()
        grads.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    (la, ga), (lb, gb) = grads
    worst = max(float((a - b).abs().max() / (b.abs().max() + 1e-12)) for a, b in zip(ga, gb))
    ok = abs(la - lb) <= 1e-4 * abs(lb) + 1e-5 and worst < 1e-3
    print(f"check: levels vs recursive on 8 trees: loss {la:.6f} vs {lb:.6f}, "
          f"max relative gradient difference {worst:.1e} -> {'ok' if ok else 'MISMATCH'}")
    if not ok:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sst", metavar="PATH", help="PTB-format SST trees (e.g. `amprun data path sst:train`) "
                    "instead of random trees")
    ap.add_argument("--data", metavar="PATH", help="trees in Amp's JSON Lines form (as amprun reads them, e.g. "
                    "written by datasets.py) instead of random trees")
    ap.add_argument("--check", action="store_true", help="with --data: compare the loss and every gradient "
                    "with Amp's (`amprun grad`) on the file's first --check-instances trees, then stop")
    ap.add_argument("--check-instances", type=int, default=16)
    ap.add_argument("--params", help="--check: an Amp checkpoint to load (default: amprun trains one)")
    ap.add_argument("--amprun", help="--check: the amprun binary (default /tmp/amprun.main, else "
                    "target/release/amprun)")
    ap.add_argument("--train-only", action="store_true", help="time training only, not inference")
    ap.add_argument("--min-leaves", type=int, default=5, help="random trees: fewest leaves (default 5)")
    ap.add_argument("--max-leaves", type=int, default=50, help="random trees: most leaves (default 50)")
    ap.add_argument("--pool", type=int, default=2000, help="random trees: how many to generate (default 2000)")
    ap.add_argument("--trees", type=int, default=2000, help="trees timed per measurement (default 2000)")
    ap.add_argument("--warmup", type=int, default=200, help="trees run before timing (default 200)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 25], help="minibatch sizes (default 1 25)")
    ap.add_argument("--strategy", nargs="+", choices=["levels", "recursive"], default=["levels", "recursive"],
                    help="how a minibatch is computed (default: both)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--optimizer-impl", choices=["fused", "foreach", "default"], default="fused",
                    help="torch.optim implementation: fused (default, the fastest on CPU), foreach, "
                         "or default (PyTorch's own choice: the per-tensor loop on CPU)")
    ap.add_argument("--lr", type=float, help="learning rate (default 0.002 for adam, 0.01 for sgd)")
    ap.add_argument("--vocab", type=int, default=5000, help="vocabulary size, <unk> included (default 5000)")
    ap.add_argument("--embed", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=150)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="skip the levels-vs-recursive gradient check")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    rng = random.Random(args.seed)

    if args.check:
        if not args.data:
            sys.exit("--check needs --data (Amp's JSON Lines trees)")
        args.amprun = args.amprun or common.DEFAULT_AMPRUN
        with open(args.data, encoding="utf-8") as f:
            objects = [json.loads(line) for line in f if line.strip()]
        common.amp_check(amp_spec(), args, objects)
        return
    if args.data:
        trees = read_json_trees(args.data)
        source = f"{args.data}: {len(trees)} trees"
    elif args.sst:
        raw = read_sst(args.sst)
        vocab = sst_vocab(raw, args.vocab)
        trees = [sst_tree(t, vocab) for t in raw]
        rng.shuffle(trees)  # the SST files are grouped by label
        source = f"SST {args.sst}: {len(trees)} trees, vocabulary {len(vocab)}"
    else:
        trees = [random_tree(rng, args.min_leaves, args.max_leaves, args.vocab, args.classes) for _ in range(args.pool)]
        source = f"{len(trees)} random trees, {args.min_leaves}-{args.max_leaves} leaves"
    leaves = sum(t.leaves for t in trees) / len(trees)
    height = sum(t.nodes[-1][0] for t in trees) / len(trees)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {source}; "
          f"mean {leaves:.1f} leaves, mean height {height:.1f}; {args.optimizer} lr "
          f"{args.lr if args.lr is not None else (0.002 if args.optimizer == 'adam' else 0.01)} "
          f"({args.optimizer_impl} implementation)")
    if not args.no_check:
        check(trees, args)

    print(f"{'strategy':<10} {'batch':>5} {'train trees/s':>14} {'GFLOP/s':>8} {'infer trees/s':>14} "
          f"{'GFLOP/s':>8} {'mean loss':>9}")
    for strategy in args.strategy:
        for b in args.batch:
            torch.manual_seed(args.seed)
            model = TreeLstm(args.vocab, args.embed, args.hidden, args.classes)
            opt = make_optimizer(args, model)
            brng = random.Random(args.seed + b)
            warm = common.minibatches(trees, b, max(args.warmup, b), brng)
            timed = common.minibatches(trees, b, args.trees, brng)
            n = sum(len(mb) for mb in timed)
            flops = sum(forward_flops(t, args.embed, args.hidden, args.classes) for mb in timed for t in mb)

            train(model, opt, warm, strategy)
            t0 = time.perf_counter()
            loss = train(model, opt, timed, strategy)
            t_train = time.perf_counter() - t0

            t_infer = float("nan")
            if not args.train_only:
                infer(model, warm, strategy)
                t0 = time.perf_counter()
                infer(model, timed, strategy)
                t_infer = time.perf_counter() - t0

            print(f"{strategy:<10} {b:>5} {n / t_train:>14.1f} {3 * flops / t_train / 1e9:>8.2f} "
                  f"{n / t_infer:>14.1f} {flops / t_infer / 1e9:>8.2f} {loss:>9.4f}", flush=True)


if __name__ == "__main__":
    main()
