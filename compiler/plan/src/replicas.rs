//! Replica proposals: which Ppts the cost model predicts are worth running as several
//! copies on several workers (amprun's `--replicate NODE=R`, or `--plan-replicas`, which
//! applies these proposals).
//!
//! **What a replicated node costs.** The executor runs copy `r` of a node placed on worker
//! `w` on worker `(w + r) mod N` (copy 0 is the node itself) and sends each forward message
//! to the copy expected to finish it first, its backward messages after it; equal copies
//! share the messages equally. So, for a node with `R` copies:
//!
//! - each copy's worker does `1 / R` of the node's per-message work;
//! - every edge of the node carries `1 / R` of its messages to or from each copy, and pays
//!   its cut cost (and, with a profile, its wake-ups) for that share wherever a copy sits
//!   on another worker than the neighbour: a copy on an idle worker takes messages that
//!   never crossed before, each now crossing twice (in and out), both directions;
//! - the master's worker keeps the node's optimizer updates and, per copy and update,
//!   adds the copy's gradients into its own and gives the copy the new values (replicas
//!   synchronised after every update, `--replica-sync 1`): twice the group's elements at
//!   the rate of a plain SGD update.
//!
//! **The search.** Greedy, on the plan's placement: among the Ppts on the busiest worker
//! (the only ones whose copies can lower the busiest time), heaviest first, and each copy
//! count from 2 to the workers, the one that lowers the plan's predicted time per instance
//! (the busiest worker, or the latency bound) the most is taken if it lowers it by at least
//! [`MIN_GAIN`]; again on the result, until none does. Replicas are not proposed for
//! workers split over processes (the executor keeps a group's nodes in its owner's
//! process).
//!
//! Measured (docs/PERFORMANCE.md, "Replicas"): on two workers, replicating the heaviest
//! products of Tree-LSTM, GGSNN and the MLP made every one slower than the plan alone;
//! with these costs the planner proposes none of them.

use crate::cost::Costs;
use crate::partition::{Problem, Score};
use crate::plan::MAX_REPLICAS;
use amp_ir::placement::copy_workers;
use amp_ir::Graph;
use petgraph::stable_graph::NodeIndex;

/// The least share of the predicted time per instance a replica must save to be
/// proposed: what the model does not count (the copies' batches half as large, the
/// routing table, the copies' caches) must not turn a predicted gain into a loss.
pub(crate) const MIN_GAIN: f64 = 0.05;

/// The most Ppts of the busiest worker tried in one round, heaviest first.
const MAX_CANDIDATES: usize = 8;

/// Node and edge visits the search may spend over all its evaluations.
const VISIT_BUDGET: usize = 20_000_000;

/// How much faster than an Adam update a pass over a group's elements goes (as a plain
/// SGD update: `cost.rs`).
const COPY_SPEEDUP: f64 = 4.0;

/// A replicated node: its index and the workers of its copies (the first is its own).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Copies {
    pub node: usize,
    pub workers: Vec<usize>,
}

/// µs per instance that keeping one copy of each Ppt in sync costs its master's worker
/// (0 for other nodes).
pub(crate) fn sync_costs(graph: &Graph, costs: &Costs) -> Vec<f64> {
    let a = &costs.assumptions;
    let mut sync = vec![0.0; costs.nodes.len()];
    for (i, slot) in sync.iter_mut().enumerate() {
        let Some(node) = graph.nodes.node_weight(NodeIndex::new(i)) else { continue };
        let Some(param) = node.op.param() else { continue };
        let elements: f64 = ["weight", "bias"]
            .iter()
            .filter_map(|t| graph.param(&format!("{param}.{t}")))
            .map(|p| p.shape.iter().map(|&d| d as f64).product::<f64>())
            .sum();
        // Gradients gathered and values given back: two passes per update.
        let us = 2.0 * elements / (COPY_SPEEDUP * a.update_elements_per_us) / a.update_every.max(1.0);
        *slot = if us.is_finite() { us } else { 0.0 };
    }
    sync
}

impl Problem<'_> {
    /// What the search compares (every worker's time, then the latency bound) under
    /// `assign` with the nodes of `replicated` run as copies; `sync` from [`sync_costs`].
    /// With nothing replicated, [`Problem::search_times`] of one process.
    pub(crate) fn replicated_times(
        &self,
        costs: &Costs,
        sync: &[f64],
        assign: &[usize],
        replicated: &[Copies],
    ) -> Vec<f64> {
        let n = self.topo.bound;
        let mut copies: Vec<Option<&[usize]>> = vec![None; n];
        for c in replicated.iter().filter(|c| c.node < n && !c.workers.is_empty()) {
            copies[c.node] = Some(&c.workers);
        }
        // Where a node's messages are handled: each worker with its share.
        let sides = |v: usize| -> Vec<(usize, f64)> {
            match copies[v] {
                Some(ws) => ws.iter().map(|&w| (w, 1.0 / ws.len() as f64)).collect(),
                None => vec![(assign[v], 1.0)],
            }
        };
        let mut times = vec![0.0; self.workers];
        let mut bound = self.latency;
        for v in self.topo.nodes() {
            match copies[v] {
                None => times[assign[v]] += self.load[v],
                Some(ws) => {
                    let update = costs.node(v).map_or(0.0, |c| c.update_us.max(0.0)).min(self.load[v]);
                    let work = self.load[v] - update;
                    let master = ws[0];
                    times[master] += update + sync.get(v).copied().unwrap_or(0.0) * (ws.len() - 1) as f64;
                    for &w in ws {
                        times[w] += work / ws.len() as f64;
                    }
                }
            }
            let mine = sides(v);
            for (u, c) in &self.adj[v] {
                if *u <= v {
                    continue;
                }
                for (b, fb) in sides(*u) {
                    for &(a, fa) in &mine {
                        if a != b {
                            let cost = self.cut(c, a, b) * fa * fb;
                            times[a] += cost;
                            times[b] += cost;
                        }
                    }
                }
            }
            for &(u, local, remote) in &self.waits[v] {
                if u <= v {
                    continue;
                }
                for (b, fb) in sides(u) {
                    for &(a, fa) in &mine {
                        if a != b {
                            let wait = if self.process[a] == self.process[b] { local } else { remote };
                            bound += wait * fa * fb;
                        }
                    }
                }
            }
        }
        for (w, t) in times.iter_mut().enumerate() {
            *t /= self.speed_of(w);
        }
        times.push(bound);
        times
    }
}

/// The replicas the cost model predicts to pay under `assign` (see the module doc), and
/// the search's times with them.
pub(crate) fn propose(problem: &Problem, costs: &Costs, sync: &[f64], assign: &[usize]) -> (Vec<Copies>, Vec<f64>) {
    let workers = problem.workers;
    let mut chosen: Vec<Copies> = Vec::new();
    let mut times = problem.replicated_times(costs, sync, assign, &chosen);
    if workers < 2 || problem.processes > 1 {
        return (chosen, times);
    }
    let visits = problem.topo.bound + problem.adj.iter().map(Vec::len).sum::<usize>();
    let mut evaluations = VISIT_BUDGET / visits.max(1);
    let eps = problem.eps();
    loop {
        let current = Score::of(&times);
        let busiest = (0..workers).max_by(|&a, &b| times[a].total_cmp(&times[b]).then(b.cmp(&a))).unwrap_or(0);
        let mut candidates: Vec<usize> = problem
            .leads()
            .filter(|&v| problem.ppt[v] && assign[v] == busiest && chosen.iter().all(|c| c.node != v))
            .collect();
        candidates.sort_by(|&a, &b| problem.load[b].total_cmp(&problem.load[a]).then(a.cmp(&b)));
        candidates.truncate(MAX_CANDIDATES);
        let mut best: Option<(Score, Copies, Vec<f64>)> = None;
        'search: for &v in &candidates {
            for count in 2..=workers.min(MAX_REPLICAS) {
                if evaluations == 0 {
                    break 'search;
                }
                evaluations -= 1;
                let copies = Copies { node: v, workers: copy_workers(assign[v], count, workers) };
                chosen.push(copies.clone());
                let trial = problem.replicated_times(costs, sync, assign, &chosen);
                chosen.pop();
                let score = Score::of(&trial);
                if best.as_ref().is_none_or(|(b, _, _)| score.better_than(b, eps)) {
                    best = Some((score, copies, trial));
                }
            }
        }
        match best {
            Some((score, copies, trial)) if score.0 < current.0 * (1.0 - MIN_GAIN) => {
                chosen.push(copies);
                times = trial;
            }
            _ => return (chosen, times),
        }
    }
}
