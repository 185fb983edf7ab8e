#!/usr/bin/env python3
"""PyTorch baseline for Amp's list reduction (`examples/list_reduce.amp`), bucketed by length.

The model is Amp's exactly, with the same `state_dict` names:

    embed = Embedding(vocab=14, hidden)       h_0 = 0
    cell  = Linear(2*hidden, hidden)          h_t = relu(cell([embed(tok_t), h_t-1]))
    head  = Linear(hidden, classes=10)        loss: cross_entropy(head(h_T), label),
                                              mean over the minibatch

Two strategies (`--strategy`), both without padding or masks:

  bucketed  (default, the faster) the usual length bucketing: each pass over the data
            groups the lists by length, shuffles each group, cuts it into minibatches of
            `--batch` lists (a group's last one may be smaller) and shuffles the
            minibatches; a minibatch is then one embedding lookup and one matmul per step.
  mixed     minibatches drawn at random as Amp draws them; each is split into buckets of
            equal length, each bucket run as above, then one head matmul and one loss.

The loss is the mean over the minibatch either way; `--check` compares the gradient of a
minibatch of mixed lengths (which both strategies compute the same way).

    python3 benches/pytorch/list_reduce.py --data examples/data/list_reduce.train.jsonl
    python3 benches/pytorch/list_reduce.py --data examples/data/list_reduce.train.jsonl --check
"""

import collections

import common
import torch
import torch.nn.functional as F
from torch import nn


class ListReduce(nn.Module):
    def __init__(self, vocab, hidden, classes):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, hidden)
        self.cell = nn.Linear(2 * hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, batch):
        """Logits (B, classes) in the minibatch's order."""
        buckets = collections.defaultdict(list)
        for pos, (tokens, _) in enumerate(batch):
            buckets[len(tokens)].append(pos)
        finals, order = [], []
        for length, positions in buckets.items():
            toks = torch.tensor([batch[p][0] for p in positions])  # (n, length)
            h = torch.zeros(len(positions), self.hidden)
            for t in range(length):
                h = torch.relu(self.cell(torch.cat([self.embed(toks[:, t]), h], dim=1)))
            finals.append(h)
            order.extend(positions)
        h = torch.cat(finals)
        # Back into the minibatch's order, so the loss sees the labels as given.
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return self.head(h.index_select(0, inverse))


def length_buckets(instances, batch, count, rng, args):
    """`count` instances (rounded up to whole minibatches) in minibatches of lists of one
    length each, through passes over `instances` (the `bucketed` strategy)."""
    if args.strategy == "mixed":
        return common.minibatches(instances, batch, count, rng)
    by_length = collections.defaultdict(list)
    for inst in instances:
        by_length[len(inst[0])].append(inst)
    out, total = [], 0
    while total < count:
        epoch = []
        for length in sorted(by_length):
            group = by_length[length][:]
            rng.shuffle(group)
            epoch.extend(group[i:i + batch] for i in range(0, len(group), batch))
        rng.shuffle(epoch)
        for mb in epoch:
            if total >= count:
                break
            out.append(mb)
            total += len(mb)
    return out


def build(args):
    return ListReduce(args.vocab, args.hidden, args.classes)


def prepare(objects, args):
    return [(o["tokens"], o["label"]) for o in objects]


def loss(model, batch):
    return F.cross_entropy(model(batch), torch.tensor([label for _, label in batch]))


def amp_args(args):
    return ["examples/list_reduce.amp", "-D", f"vocab={args.vocab}", "-D", f"hidden={args.hidden}",
            "-D", f"classes={args.classes}"]


def add_args(ap):
    ap.add_argument("--vocab", type=int, default=14)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--strategy", choices=["bucketed", "mixed"], default="bucketed")


SPEC = common.Spec("list_reduce", build, prepare, loss, amp_args, add_args, strategy="bucketed",
                   batcher=length_buckets)

if __name__ == "__main__":
    common.main(SPEC, __doc__)
