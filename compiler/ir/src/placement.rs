//! Where things run: the placement rules that the planner predicts and the executor
//! follows, kept once so the two cannot drift apart.
//!
//! - a run's workers are split over its processes in contiguous blocks ([`workers_of`],
//!   [`process_of`]);
//! - the copies of a replicated node go to the workers after its own ([`copy_workers`]);
//! - `k` copies of the whole graph over `k × s` workers: copy `c` runs the plan for `s`
//!   workers on workers `c·s .. (c+1)·s` ([`graph_copy_worker`], [`copy_of_worker`]),
//!   and its parameter groups are owned by copy 0's owners;
//! - a parameter group is owned (updated, checkpointed) by the worker of its first node in
//!   index order ([`group_owners`]);
//! - a message that crosses processes costs [`MESSAGE_HEADER_BYTES`] beyond its payload
//!   and state (the executor's wire codec tests that it encodes exactly that).

use crate::{Graph, Op, PayloadTy};
use petgraph::visit::NodeIndexable;
use std::collections::BTreeMap;
use std::ops::Range;

/// The most processes one run may be split over (checked before anything is connected or
/// allocated for them): every process holds a connection, two network threads and a
/// heartbeat to each other one, and the loopback tests and benches go no further.
pub const MAX_RUN_PROCESSES: usize = 16;

/// The most processes a plan may assume: what-if plans for larger clusters than a run may
/// form today ([`MAX_RUN_PROCESSES`]) are allowed, and bounded so that a plan's per-process
/// tables stay small.
pub const MAX_PLANNED_PROCESSES: usize = 256;

/// Bytes the wire format adds to each forward or backward message that crosses processes,
/// beyond 4 per f32 of its payload and 8 per state field: its item tag, worker, word tag,
/// node, port, direction, state length and payload length (docs/distributed.md, "What crosses the
/// network").
pub const MESSAGE_HEADER_BYTES: usize = 20;

/// The worker range of process `process` of `processes` among `workers`: contiguous
/// blocks, the first `workers % processes` one larger. `processes` is taken as at least 1.
pub fn workers_of(process: usize, processes: usize, workers: usize) -> Range<usize> {
    let processes = processes.max(1);
    let (base, extra) = (workers / processes, workers % processes);
    let start = (process * base + process.min(extra)).min(workers);
    let len = base + usize::from(process < extra);
    start..(start + len).min(workers)
}

/// The process that runs worker `worker` of `workers` split over `processes` (the inverse
/// of [`workers_of`]; processes beyond the workers' count hold none). A worker past the
/// last is taken as the last process's.
pub fn process_of(worker: usize, processes: usize, workers: usize) -> usize {
    let processes = processes.clamp(1, workers.max(1));
    let (base, extra) = (workers / processes, workers % processes);
    // The first `extra` processes hold base + 1 workers each.
    let long = extra * (base + 1);
    if worker < long {
        worker / (base + 1)
    } else {
        // `base` is 0 only without workers.
        (worker - long).checked_div(base).map_or(processes - 1, |k| (extra + k).min(processes - 1))
    }
}

/// The workers of `copies` copies of a node on worker `worker` among `workers`: copy `r`
/// on `(worker + r) mod workers`, so copy 0 is the node itself.
pub fn copy_workers(worker: usize, copies: usize, workers: usize) -> Vec<usize> {
    (0..copies).map(|r| (worker + r) % workers.max(1)).collect()
}

/// The worker that runs, in copy `copy` of the whole graph, what worker `worker` runs in
/// the plan for `stage_workers` workers that every copy follows (copy 0 is the plan
/// itself).
pub fn graph_copy_worker(worker: usize, copy: usize, stage_workers: usize) -> usize {
    copy * stage_workers.max(1) + worker
}

/// The copy of the whole graph that worker `worker` runs (the inverse of
/// [`graph_copy_worker`]).
pub fn copy_of_worker(worker: usize, stage_workers: usize) -> usize {
    worker / stage_workers.max(1)
}

/// Each parameter group's owning node: the first node, in index order, whose op reads the
/// group ([`crate::Op::param`]). The group's updates run on that node's worker.
pub fn group_owners(graph: &Graph) -> BTreeMap<&str, usize> {
    let mut owners = BTreeMap::new();
    for (i, node) in nodes_in_order(graph) {
        if let Some(param) = node.op.param() {
            owners.entry(param).or_insert(i);
        }
    }
    owners
}

/// The graph's nodes in index order (holes skipped), with their indices.
fn nodes_in_order(graph: &Graph) -> Vec<(usize, &crate::Node)> {
    let mut nodes: Vec<(usize, &crate::Node)> =
        graph.nodes.node_indices().filter_map(|i| Some((i.index(), graph.nodes.node_weight(i)?))).collect();
    nodes.sort_unstable_by_key(|&(i, _)| i);
    nodes
}

/// Per node index, the worker of a round-robin placement: the `k`-th node (in index
/// order) on worker `k mod workers`; `None` at holes.
pub fn round_robin(graph: &Graph, workers: usize) -> Vec<Option<usize>> {
    let mut placed = vec![None; graph.nodes.node_bound()];
    for (k, (i, _)) in nodes_in_order(graph).into_iter().enumerate() {
        placed[i] = Some(k % workers.max(1));
    }
    placed
}

/// Per node index, the worker of a contiguous placement: the nodes in index order cut
/// into `workers` ranges of about equal work (a rough count per message: a Linear's
/// weights twice, a lookup's row twice, any other node its elements in and out), each
/// node on the worker whose share holds the middle of its work; `None` at holes. What
/// the executor runs without a plan (`ExecConfig::placement`).
pub fn contiguous(graph: &Graph, workers: usize) -> Vec<Option<usize>> {
    let workers = workers.max(1);
    let nodes = nodes_in_order(graph);
    let costs: Vec<u64> = nodes.iter().map(|(_, node)| work(graph, node)).collect();
    let total: u64 = costs.iter().sum::<u64>().max(1);
    let mut placed = vec![None; graph.nodes.node_bound()];
    let mut before = 0u64;
    for ((i, _), c) in nodes.into_iter().zip(costs) {
        let middle = before + c / 2;
        placed[i] = Some(((middle as u128 * workers as u128 / total as u128) as usize).min(workers - 1));
        before += c;
    }
    placed
}

/// A rough count of the work a node does per message, to balance contiguous ranges.
fn work(graph: &Graph, node: &crate::Node) -> u64 {
    let out: u64 = node.outputs.iter().map(PayloadTy::elements).sum();
    match &node.op {
        Op::Linear { param } => graph.param(&format!("{param}.weight")).map_or(1, |p| p.shape.iter().product()) * 2,
        // Per row for a batch of rows: their count is known only at run time.
        Op::Embedding { .. } | Op::EmbeddingRows { .. } => out * 2,
        _ => out + node.inputs.iter().map(PayloadTy::elements).sum::<u64>() + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_of_inverts_workers_of() {
        for workers in 0..40 {
            for processes in 1..=20 {
                let mut seen = 0;
                for p in 0..processes {
                    let range = workers_of(p, processes, workers);
                    assert_eq!(range.start, seen.min(workers), "{workers} workers, {processes} processes");
                    seen = range.end.max(seen);
                    for w in range {
                        assert_eq!(process_of(w, processes, workers), p, "worker {w} of {workers} / {processes}");
                    }
                }
                assert_eq!(seen, workers);
            }
        }
    }

    #[test]
    fn blocks_differ_in_size_by_at_most_one() {
        let sizes: Vec<usize> = (0..4).map(|p| workers_of(p, 4, 10).len()).collect();
        assert_eq!(sizes, [3, 3, 2, 2]);
        assert_eq!(workers_of(5, 4, 10), 10..10);
    }

    /// source → read → linear [64 ← 32] → relu → linear [3 ← 64] → loss.
    const CHAIN: &str = r#"amp.graph @Chain {
  state %inst: instance
  param a.weight: f32[64, 32] uniform(32)
  param a.bias: f32[64] uniform(32)
  param b.weight: f32[3, 64] uniform(64)
  param b.bias: f32[3] uniform(64)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[32] "read"
  %2 = linear @a (%1#0: f32[32]) -> f32[64] key(%inst) "a"
  %3 = unary relu (%2#0: f32[64]) -> f32[64] key(%inst) "relu"
  %4 = linear @b (%3#0: f32[64]) -> f32[3] key(%inst) "b"
  %5 = loss cross_entropy [$.label] (%4#0: f32[3]) -> () key(%inst) "loss"
}
"#;

    /// Round robin deals the nodes out in index order; contiguous ranges follow the index
    /// order, every worker gets some, and the large product sits alone.
    #[test]
    fn round_robin_and_contiguous_placements() {
        let graph = crate::text::parse(CHAIN).unwrap();
        let some = |v: &[usize]| v.iter().map(|&w| Some(w)).collect::<Vec<_>>();
        assert_eq!(round_robin(&graph, 4), some(&[0, 1, 2, 3, 0, 1]));
        assert_eq!(round_robin(&graph, 1), some(&[0; 6]));
        let two = contiguous(&graph, 2);
        assert_eq!(two, some(&[0, 0, 0, 1, 1, 1]), "the 64×32 product's middle ends the first half");
        let three: Vec<usize> = contiguous(&graph, 3).into_iter().flatten().collect();
        assert!(three.windows(2).all(|w| w[0] <= w[1]), "{three:?}");
        assert_eq!(contiguous(&graph, 1), some(&[0; 6]));
    }

    #[test]
    fn copies_follow_their_node_and_wrap() {
        assert_eq!(copy_workers(2, 3, 4), [2, 3, 0]);
        assert_eq!(copy_workers(0, 1, 1), [0]);
        assert_eq!(copy_workers(1, 2, 0), [0, 0]);
        // Two copies of a two-stage plan: copy 1 on workers 2 and 3.
        assert_eq!((0..2).map(|w| graph_copy_worker(w, 1, 2)).collect::<Vec<_>>(), [2, 3]);
        assert_eq!((0..4).map(|w| copy_of_worker(w, 2)).collect::<Vec<_>>(), [0, 0, 1, 1]);
    }
}
