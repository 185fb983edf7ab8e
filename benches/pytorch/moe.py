#!/usr/bin/env python3
"""PyTorch baseline for Amp's mixture of experts (`examples/moe.amp`), per-expert dispatch.

The model is Amp's exactly, with the same `state_dict` names:

    gate   = Linear(d, experts)            (idx, w) = top_k(softmax(gate(x)), k)
    expert = [Mlp(d, d, d); experts]       y = sum_j w[j] * expert[idx[j]](x)
             (expert.E.l1, expert.E.l2:    Mlp: l2(relu(l1(x))))
    head   = Linear(d, classes)            loss: cross_entropy(head(y), label), mean over
                                           the minibatch

The weights w are the softmax's top k probabilities as they are (not renormalised), and
the gradient flows through them into the gate, as in Amp. A minibatch runs the gate as one
matmul, then each expert once on the rows routed to it (gathered by index, scaled by
their weights, added back with index_add), then one head matmul: the usual dispatch.

    python3 benches/pytorch/moe.py --data examples/data/moe.train.jsonl
    python3 benches/pytorch/moe.py --data examples/data/moe.train.jsonl --check
"""

import common
import torch
import torch.nn.functional as F
from torch import nn


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class Moe(nn.Module):
    def __init__(self, d, experts, k, classes):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(d, experts)
        self.expert = nn.ModuleList([Mlp(d) for _ in range(experts)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        w, idx = torch.topk(torch.softmax(self.gate(x), dim=1), self.k, dim=1)  # (B, k) each
        flat_idx = idx.reshape(-1)
        flat_w = w.reshape(-1, 1)
        rows = torch.arange(x.shape[0]).repeat_interleave(self.k)  # the row of each (row, j)
        y = torch.zeros_like(x)
        # Which (row, j) pairs go to each expert: one sort instead of a scan per expert.
        order = torch.argsort(flat_idx, stable=True)
        counts = torch.bincount(flat_idx, minlength=len(self.expert)).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            sel = order[start:start + n]
            start += n
            r = rows.index_select(0, sel)
            y = y.index_add(0, r, self.expert[e](x.index_select(0, r)) * flat_w.index_select(0, sel))
        return self.head(y)


def build(args):
    return Moe(args.d, args.experts, args.k, args.classes)


def prepare(objects, args):
    return [(torch.tensor(o["x"], dtype=torch.float32), o["label"]) for o in objects]


def loss(model, batch):
    x = torch.stack([v for v, _ in batch])
    return F.cross_entropy(model(x), torch.tensor([label for _, label in batch]))


def amp_args(args):
    return ["examples/moe.amp", "-D", f"d={args.d}", "-D", f"experts={args.experts}", "-D", f"k={args.k}",
            "-D", f"classes={args.classes}"]


def add_args(ap):
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--classes", type=int, default=10)


SPEC = common.Spec("moe", build, prepare, loss, amp_args, add_args, strategy="dispatch", unused_parameters=True)

if __name__ == "__main__":
    common.main(SPEC, __doc__)
