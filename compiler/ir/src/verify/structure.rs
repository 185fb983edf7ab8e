//! Ports and edges: every edge leaves an existing output port and enters an existing
//! input port, every input port has exactly one edge, the edge's payload type is the
//! port's, and no node feeds itself. Also builds the adjacency the later checks walk.

use super::{Checker, VerifyErrorKind};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::{EdgeRef, IntoEdgeReferences};

/// Successors and predecessors by dense node index (compressed rows), one entry per
/// edge, plus which nodes fan out (an output port with two or more edges).
pub(super) struct Adjacency {
    succ_start: Vec<usize>,
    succ: Vec<usize>,
    pred_start: Vec<usize>,
    pred: Vec<usize>,
    fans_out: Vec<bool>,
}

impl Adjacency {
    pub(super) fn succs(&self, node: usize) -> &[usize] {
        row(&self.succ_start, &self.succ, node)
    }

    pub(super) fn preds(&self, node: usize) -> &[usize] {
        row(&self.pred_start, &self.pred, node)
    }

    pub(super) fn fans_out(&self, node: usize) -> bool {
        self.fans_out.get(node).copied().unwrap_or(false)
    }
}

fn row<'a>(start: &[usize], items: &'a [usize], node: usize) -> &'a [usize] {
    match (start.get(node), start.get(node + 1)) {
        (Some(&a), Some(&b)) => items.get(a..b).unwrap_or(&[]),
        _ => &[],
    }
}

/// Compressed rows from (row, item) pairs.
fn compress(rows: usize, pairs: &[(usize, usize)]) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; rows + 1];
    for &(r, _) in pairs {
        if let Some(count) = start.get_mut(r + 1) {
            *count += 1;
        }
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut fill = start.clone();
    let mut items = vec![0usize; pairs.len()];
    for &(r, item) in pairs {
        if let Some(slot) = fill.get_mut(r) {
            if let Some(place) = items.get_mut(*slot) {
                *place = item;
            }
            *slot += 1;
        }
    }
    (start, items)
}

/// Checks every edge and input port; returns the adjacency of the whole graph (every
/// edge, valid or not, so that reachability and cycles see the graph as it is).
pub(super) fn check_ports(cx: &mut Checker) -> Adjacency {
    let bound = cx.bound();
    // Port slots: node i's input p is slot in_start[i] + p.
    let mut in_start = vec![0usize; bound + 1];
    let mut out_start = vec![0usize; bound + 1];
    for i in 0..bound {
        let (ins, outs) = cx.node(i).map_or((0, 0), |n| (n.inputs.len(), n.outputs.len()));
        in_start[i + 1] = in_start[i] + ins;
        out_start[i + 1] = out_start[i] + outs;
    }
    let mut in_edges = vec![0usize; in_start[bound]];
    let mut out_edges = vec![0usize; out_start[bound]];

    let mut forward = Vec::with_capacity(cx.graph.nodes.edge_count());
    let mut backward = Vec::with_capacity(cx.graph.nodes.edge_count());
    for edge in cx.graph.nodes.edge_references() {
        let (s, t, w) = (edge.source().index(), edge.target().index(), *edge.weight());
        forward.push((s, t));
        backward.push((t, s));
        if s == t {
            cx.report(s, VerifyErrorKind::SelfLoop { from_port: w.from_port, to_port: w.to_port });
        }
        let (Some(src), Some(dst)) = (cx.node(s), cx.node(t)) else { continue };
        let from = src.outputs.get(usize::from(w.from_port));
        let to = dst.inputs.get(usize::from(w.to_port));
        if from.is_none() {
            let kind = VerifyErrorKind::OutputPortOutOfRange {
                port: w.from_port,
                outputs: src.outputs.len(),
                target: NodeIndex::new(t),
            };
            cx.report(s, kind);
        } else if let Some(count) = out_edges.get_mut(out_start[s] + usize::from(w.from_port)) {
            *count += 1;
        }
        if to.is_none() {
            let kind = VerifyErrorKind::InputPortOutOfRange {
                port: w.to_port,
                inputs: dst.inputs.len(),
                source: NodeIndex::new(s),
            };
            cx.report(t, kind);
        } else if let Some(count) = in_edges.get_mut(in_start[t] + usize::from(w.to_port)) {
            *count += 1;
        }
        if let (Some(found), Some(expected)) = (from, to) {
            if found != expected {
                let kind = VerifyErrorKind::EdgeTypeMismatch {
                    port: w.to_port,
                    source: NodeIndex::new(s),
                    source_port: w.from_port,
                    found: found.clone(),
                    expected: expected.clone(),
                };
                cx.report(t, kind);
            }
        }
    }

    let mut fans_out = vec![false; bound];
    for i in 0..bound {
        let ins = in_edges.get(in_start[i]..in_start[i + 1]).unwrap_or(&[]);
        for (port, &edges) in ins.iter().enumerate() {
            match edges {
                1 => {}
                0 => cx.report(i, VerifyErrorKind::InputUnconnected { port }),
                _ => cx.report(i, VerifyErrorKind::InputMultiplyConnected { port, edges }),
            }
        }
        let outs = out_edges.get(out_start[i]..out_start[i + 1]).unwrap_or(&[]);
        fans_out[i] = outs.iter().any(|&edges| edges >= 2);
    }

    let (succ_start, succ) = compress(bound, &forward);
    let (pred_start, pred) = compress(bound, &backward);
    Adjacency { succ_start, succ, pred_start, pred, fans_out }
}
