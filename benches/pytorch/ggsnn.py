#!/usr/bin/env python3
"""PyTorch baseline for Amp's gated graph sequence network (`examples/ggsnn.amp`), batched
over the graphs of a minibatch.

The model is Amp's exactly, with the same `state_dict` names:

    emb  = Embedding(kinds, hidden)              h_v = emb(kind_v)
    msg  = [Linear(hidden, hidden); edge_kinds]  `steps` times:
    gru  = GruCell(hidden, hidden)                 m_e = msg[kind_e](h[src_e])   (bias per edge)
           (std::nn: gru.ih = Linear(hidden,       a_v = sum of m_e over edges e with dst_e = v
           3*hidden), gru.hh = Linear(hidden,      h_v = gru(a_v, h_v)
           3*hidden), gates r, z, n as PyTorch)  loss: cross_entropy(head(sum_v h_v), label),
    head = Linear(hidden, classes)                 mean over the minibatch

A minibatch is one disjoint union of its graphs (node and edge indices offset): each step
is, per edge kind, one gather of the source rows and one matmul, an index_add of the
messages into their destinations, and one GRU (two matmuls) over all nodes; the readout
sums each graph's rows with one index_add. The GRU is written as std::nn's GruCell (two
Linear layers) rather than nn.GRUCell so that the names and the initialisation are Amp's:
nn.GRUCell draws every tensor from U(+-1/sqrt(hidden)), Amp's ih layer from
U(+-1/sqrt(input)) (equal here, input = hidden).

    python3 benches/pytorch/datasets.py /tmp/ampdata
    python3 benches/pytorch/ggsnn.py --data /tmp/ampdata/ggsnn.jsonl --hidden 32
    python3 benches/pytorch/ggsnn.py --data /tmp/ampdata/ggsnn.jsonl --check
"""

import common
import torch
import torch.nn.functional as F
from torch import nn


class GruCell(nn.Module):
    def __init__(self, inp, hidden):
        super().__init__()
        self.ih = nn.Linear(inp, 3 * hidden)
        self.hh = nn.Linear(hidden, 3 * hidden)

    def forward(self, x, h):
        xr, xz, xn = self.ih(x).chunk(3, dim=1)
        hr, hz, hn = self.hh(h).chunk(3, dim=1)
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return (1.0 - z) * n + z * h


class Ggsnn(nn.Module):
    def __init__(self, kinds, edge_kinds, hidden, steps, classes):
        super().__init__()
        self.steps = steps
        self.emb = nn.Embedding(kinds, hidden)
        self.msg = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(edge_kinds)])
        self.gru = GruCell(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, batch):
        """Logits (G, classes) of the minibatch's graphs, in order."""
        kinds, graph_of = [], []
        per_kind = [([], []) for _ in self.msg]  # (sources, destinations) per edge kind
        for g, (nodes, edges, _) in enumerate(batch):
            base = len(kinds)
            kinds.extend(nodes)
            graph_of.extend([g] * len(nodes))
            for src, dst, kind in edges:
                per_kind[kind][0].append(base + src)
                per_kind[kind][1].append(base + dst)
        kinds_t = torch.tensor(kinds)
        edges_t = [(torch.tensor(s), torch.tensor(d)) for s, d in per_kind if s]
        kind_of = [k for k, (s, _) in enumerate(per_kind) if s]
        h = self.emb(kinds_t)
        for _ in range(self.steps):
            a = torch.zeros_like(h)
            for k, (src, dst) in zip(kind_of, edges_t):
                a = a.index_add(0, dst, self.msg[k](h.index_select(0, src)))
            h = self.gru(a, h)
        pooled = torch.zeros(len(batch), h.shape[1]).index_add(0, torch.tensor(graph_of), h)
        return self.head(pooled)


def build(args):
    return Ggsnn(args.kinds, args.edge_kinds, args.hidden, args.steps, args.classes)


def prepare(objects, args):
    return [(o["nodes"], [(e["src"], e["dst"], e["kind"]) for e in o["edges"]], o["label"]) for o in objects]


def loss(model, batch):
    return F.cross_entropy(model(batch), torch.tensor([g[2] for g in batch]))


def amp_args(args):
    return ["examples/ggsnn.amp", "-D", f"kinds={args.kinds}", "-D", f"edge_kinds={args.edge_kinds}",
            "-D", f"hidden={args.hidden}", "-D", f"steps={args.steps}", "-D", f"classes={args.classes}"]


def add_args(ap):
    ap.add_argument("--kinds", type=int, default=8)
    ap.add_argument("--edge-kinds", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--classes", type=int, default=2)


SPEC = common.Spec("ggsnn", build, prepare, loss, amp_args, add_args, strategy="batched")

if __name__ == "__main__":
    common.main(SPEC, __doc__)
