#!/usr/bin/env python3
"""PyTorch baselines for Amp's neural module network (`examples/module_network.amp`):
the IEP execution engine's two ways of running a minibatch of programs.

The model is Amp's exactly, with the same `state_dict` names and PyTorch's default
initialisation (Amp's scheme):

    digit  = Embedding(10, H)                      Digit { d }           -> digit(d)
    unary  = [Mlp(H, H, H)] * 4                    Unary { f, arg }      -> relu(unary[f](run(arg)))
    binary = [Mlp(2H, H, H)] * 4                   Binary { f, l, r }    -> relu(binary[f](concat(run(l), run(r))))
    head   = Linear(H, 10)                         loss: cross_entropy(head(run(prog)), label),
                                                   the mean over the minibatch
    (Mlp(a, b, c) = l2(relu(l1(x))), l1 = Linear(a, b), l2 = Linear(b, c))

Strategies (`--strategy`):

  recursive  the IEP execution engine's original loop (Johnson et al. 2017): per program,
             the recursion one node at a time, each module applied to one row.
  levels     the dynamic-batching seed's method (its "improved topological sort"): the
             nodes of the whole minibatch grouped by height (digits at 0, a node at 1 +
             its highest argument), and within a height by module; one embedding lookup
             for the digits, then one batched call per (height, module), one head and one
             loss. The grouping (in Python) is inside the timed loop, as in the seed.

`--check` compares the loss and every gradient with `amprun grad` on the same parameters
and instances (`common.amp_check`); run it once per strategy.

usage:
    python3 benches/pytorch/module_network.py --data examples/data/programs.train.jsonl --check --strategy levels
    python3 benches/pytorch/module_network.py --data examples/data/programs.train.jsonl --strategy recursive
    python3 benches/pytorch/module_network.py --data examples/data/programs.train.jsonl --batch 8 25 64 128 256

`benches/pytorch/modules_beside.py` runs both beside `amprun` and prints the ratios.
"""

import collections
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402  (beside this script)

DIGIT, UNARY, BINARY = 0, 1, 2


class Program:
    """A program's nodes in post-order (arguments before the node, the root last): each
    `(kind, f_or_digit, args, height)`, `args` the positions of its arguments."""

    __slots__ = ("nodes", "label")

    def __init__(self, nodes, label):
        self.nodes = nodes
        self.label = label


def program(obj):
    """Amp's JSON Lines form of `record Example { prog: Prog, label: int }` -> Program."""
    nodes = []

    def build(p):
        if "Digit" in p:
            nodes.append((DIGIT, p["Digit"]["d"], (), 0))
        elif "Unary" in p:
            body = p["Unary"]
            arg = build(body["arg"])
            nodes.append((UNARY, body["f"], (arg,), nodes[arg][3] + 1))
        else:
            body = p["Binary"]
            left, right = build(body["left"]), build(body["right"])
            nodes.append((BINARY, body["f"], (left, right), max(nodes[left][3], nodes[right][3]) + 1))
        return len(nodes) - 1

    build(obj["prog"])
    return Program(nodes, obj["label"])


class Mlp(nn.Module):
    def __init__(self, a, b, c):
        super().__init__()
        self.l1 = nn.Linear(a, b)
        self.l2 = nn.Linear(b, c)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class ModuleNetwork(nn.Module):
    def __init__(self, hidden=64, unaries=4, binaries=4, classes=10, strategy="levels"):
        super().__init__()
        self.hidden = hidden
        self.strategy = strategy
        self.digit = nn.Embedding(10, hidden)
        self.unary = nn.ModuleList([Mlp(hidden, hidden, hidden) for _ in range(unaries)])
        self.binary = nn.ModuleList([Mlp(2 * hidden, hidden, hidden) for _ in range(binaries)])
        self.head = nn.Linear(hidden, classes)

    # -- the IEP loop: one program, one node at a time ------------------------------------
    def run_recursive(self, prog):
        out = [None] * len(prog.nodes)
        for j, (kind, f, args, _) in enumerate(prog.nodes):
            if kind == DIGIT:
                out[j] = self.digit(torch.tensor([f]))
            elif kind == UNARY:
                out[j] = torch.relu(self.unary[f](out[args[0]]))
            else:
                out[j] = torch.relu(self.binary[f](torch.cat([out[args[0]], out[args[1]]], dim=1)))
        return out[-1]

    # -- the seed's batching: by height, then by module -----------------------------------
    def run_levels(self, batch):
        """The roots' vectors (B, H): one call per (height, module) over the minibatch."""
        groups = collections.defaultdict(list)  # (height, kind, f) -> [(program, node)]
        for b, prog in enumerate(batch):
            for j, (kind, f, _, height) in enumerate(prog.nodes):
                groups[(height, kind, 0 if kind == DIGIT else f)].append((b, j))
        # Rows in (height, module) order, so that each group's outputs are contiguous and
        # its arguments lie in earlier rows.
        order = sorted(groups)
        slot, rows = {}, 0
        for key in order:
            for bj in groups[key]:
                slot[bj] = rows
                rows += 1
        out = torch.empty(rows, self.hidden)
        for height, kind, f in order:
            members = groups[(height, kind, f)]
            lo, hi = slot[members[0]], slot[members[0]] + len(members)
            if kind == DIGIT:
                digits = [batch[b].nodes[j][1] for b, j in members]
                out[lo:hi] = self.digit(torch.tensor(digits))
                continue
            arity = 1 if kind == UNARY else 2
            index = torch.tensor([slot[(b, a)] for b, j in members for a in batch[b].nodes[j][2]])
            x = out.index_select(0, index).view(hi - lo, arity * self.hidden)
            module = self.unary[f] if kind == UNARY else self.binary[f]
            out[lo:hi] = torch.relu(module(x))
        return out.index_select(0, torch.tensor([slot[(b, len(p.nodes) - 1)] for b, p in enumerate(batch)]))

    def forward(self, batch):
        if self.strategy == "levels":
            roots = self.run_levels(batch)
        else:
            roots = torch.cat([self.run_recursive(p) for p in batch])
        return self.head(roots)


def build(args):
    return ModuleNetwork(args.hidden, 4, 4, 10, args.strategy)


def prepare(objects, args):
    return [program(o) for o in objects]


def loss(model, batch):
    return F.cross_entropy(model(batch), torch.tensor([p.label for p in batch]))


def amp_args(args):
    return ["examples/module_network.amp", "-D", f"hidden={args.hidden}"]


def add_args(ap):
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--strategy", choices=["levels", "recursive"], default="levels")


SPEC = common.Spec("module_network", build, prepare, loss, amp_args, add_args, strategy="levels")

if __name__ == "__main__":
    common.main(SPEC, __doc__)
