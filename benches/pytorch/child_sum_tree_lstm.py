#!/usr/bin/env python3
"""A PyTorch child-sum Tree-LSTM (Tai et al. 2015), written from the paper, against Amp's
`examples/child_sum_tree_lstm.amp`, with the same `state_dict` names:

    emb  = Embedding(V, E)        x      = emb(word)
    w    = Linear(E, 4H)          [wi, wo, wu, wf] = split(w(x), 4)
    u    = Linear(H, 3H)          [ui, uo, uu]     = split(u(sum of the children's h), 3)
    uf   = Linear(H, H)           f_k    = sigmoid(wf + uf(h_k)), one per child k
    head = Linear(H, C)           c      = sigmoid(wi + ui) * tanh(wu + uu) + sum_k f_k * c_k
                                  h      = sigmoid(wo + uo) * tanh(c)
    loss: cross_entropy(head(h at the root), label), the mean over the minibatch

A node without children sums nothing: zeros. The recursion runs one node at a time
(`--strategy recursive`, the loop a PyTorch user writes first).

`--check` compares the loss and every gradient with `amprun grad` on the same parameters
and instances (`common.amp_check`).

usage:
    python3 benches/pytorch/child_sum_tree_lstm.py --data examples/data/dependency.train.jsonl --check
    python3 benches/pytorch/child_sum_tree_lstm.py --data examples/data/dependency.train.jsonl --batch 8 25 64
"""

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import common  # noqa: E402  (beside this script)


class ChildSumTreeLstm(nn.Module):
    def __init__(self, vocab, embed, hidden, classes):
        super().__init__()
        self.hidden = hidden
        self.emb = nn.Embedding(vocab, embed)
        self.w = nn.Linear(embed, 4 * hidden)
        self.u = nn.Linear(hidden, 3 * hidden)
        self.uf = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def encode(self, node):
        """`node` is Amp's JSON form `{"Node": {"word", "label", "children"}}`; returns (h, c)."""
        body = node["Node"]
        kids = [self.encode(k) for k in body["children"]]
        wi, wo, wu, wf = self.w(self.emb(torch.tensor(body["word"]))).chunk(4)
        if kids:
            hs = torch.stack([h for h, _ in kids])
            cs = torch.stack([c for _, c in kids])
            fc = (torch.sigmoid(wf + self.uf(hs)) * cs).sum(0)
            h_sum = hs.sum(0)
        else:
            fc = torch.zeros(self.hidden)
            h_sum = torch.zeros(self.hidden)
        ui, uo, uu = self.u(h_sum).chunk(3)
        c = torch.sigmoid(wi + ui) * torch.tanh(wu + uu) + fc
        return torch.sigmoid(wo + uo) * torch.tanh(c), c

    def forward(self, batch):
        return self.head(torch.stack([self.encode(s["tree"])[0] for s in batch]))


def build(args):
    return ChildSumTreeLstm(args.vocab, args.embed, args.hidden, 3)


def prepare(objects, args):
    return objects


def loss(model, batch):
    return F.cross_entropy(model(batch), torch.tensor([s["label"] for s in batch]))


def amp_args(args):
    return ["examples/child_sum_tree_lstm.amp", "-D", f"vocab={args.vocab}", "-D", f"embed={args.embed}",
            "-D", f"hidden={args.hidden}"]


def add_args(ap):
    ap.add_argument("--vocab", type=int, default=20)
    ap.add_argument("--embed", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--strategy", choices=["recursive"], default="recursive")


SPEC = common.Spec("child_sum_tree_lstm", build, prepare, loss, amp_args, add_args, strategy="recursive")

if __name__ == "__main__":
    common.main(SPEC, __doc__)
