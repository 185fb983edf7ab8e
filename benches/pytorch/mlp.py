#!/usr/bin/env python3
"""PyTorch baseline for Amp's MLP (`examples/mlp.amp`), on the 8x8 digits.

The model is Amp's exactly, with the same `state_dict` names:

    l1 = Linear(64, hidden)      forward: out(relu(l2(relu(l1(pixels)))))
    l2 = Linear(hidden, hidden)  loss: cross_entropy(forward, label), mean over the minibatch
    out = Linear(hidden, 10)

A minibatch is one (B, 64) matrix through three matmuls. The data is Amp's JSON Lines
form of the digits (`{"pixels": [64 numbers], "label": k}`; `datasets.py` writes it from
`data/digits/digits.csv` with Amp's `--scale 0.0625`).

    python3 benches/pytorch/datasets.py /tmp/ampdata
    python3 benches/pytorch/mlp.py --data /tmp/ampdata/mlp.jsonl
    python3 benches/pytorch/mlp.py --data /tmp/ampdata/mlp.jsonl --check
"""

import common
import torch
import torch.nn.functional as F
from torch import nn


class Mlp3(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.l1 = nn.Linear(64, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.out(torch.relu(self.l2(torch.relu(self.l1(x)))))


def build(args):
    return Mlp3(args.hidden)


def prepare(objects, args):
    return [(torch.tensor(o["pixels"], dtype=torch.float32), o["label"]) for o in objects]


def loss(model, batch):
    x = torch.stack([p for p, _ in batch])
    return F.cross_entropy(model(x), torch.tensor([label for _, label in batch]))


def amp_args(args):
    return ["examples/mlp.amp", "-D", f"hidden={args.hidden}"]


def add_args(ap):
    ap.add_argument("--hidden", type=int, default=128)


SPEC = common.Spec("mlp", build, prepare, loss, amp_args, add_args, strategy="batched")

if __name__ == "__main__":
    common.main(SPEC, __doc__)
