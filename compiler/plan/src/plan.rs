//! The plan: which worker runs each node, what the cost model predicts for it, as JSON (the
//! `.ampg` file's `plan` and `ampc compile --emit plan`) and as a table; and the checks a
//! plan read from a file must pass before a runtime follows it.

use crate::cost::{Assumptions, Costs};
use crate::partition::{self, Problem};
use crate::replicas;
use crate::topology::Topology;
use crate::PlanError;
use amp_ir::verify::Verified;
use amp_ir::Graph;
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::NodeIndexable;
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// The most workers a plan may have (the executor's limit).
pub const MAX_WORKERS: usize = 1024;

/// The most copies of one node (the executor's limit).
pub const MAX_REPLICAS: usize = 64;

/// A partition plan and its predictions. Shares are of the total predicted work per
/// instance (communication not included), so the nodes' `predicted_load` sum to 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The workers of one copy of the graph, which this placement spreads it over.
    pub workers: usize,
    /// Copies of the whole graph, each on its own block of `workers` workers (`layout.rs`;
    /// amprun's `--copies`): the run has `copies × workers` workers. 1 in plans written
    /// before copies.
    #[serde(default = "one")]
    pub copies: usize,
    /// The layouts weighed for the run's workers (`copies` × `workers` each) and their
    /// predicted speedups; empty when the plan was made for one layout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<crate::layout::LayoutOption>,
    /// One entry per node of the graph, in index order.
    pub nodes: Vec<PlannedNode>,
    /// Per worker, the share of the work its nodes do (sums to 1).
    #[serde(default)]
    pub workers_load: Vec<f64>,
    /// Per worker, what its cut edges cost, as a share of the same total.
    #[serde(default)]
    pub workers_comm: Vec<f64>,
    /// Per worker, its predicted time per instance (work and communication) over the
    /// busiest worker's: the share of time it is busy once the busiest one is saturated.
    #[serde(default)]
    pub predicted_utilization: Vec<f64>,
    /// Ppts the cost model predicts are worth running as several copies on this
    /// placement (`replicas.rs`): amprun runs them with `--plan-replicas`, not by default.
    #[serde(default)]
    pub replicas: Vec<Replica>,
    /// Total work over the busiest worker's time (or the latency bound) with the proposed
    /// replicas: the predicted speedup over one worker when they run. 0 in plans written
    /// before replicas were predicted.
    #[serde(default)]
    pub replica_speedup: f64,
    /// Per worker, `predicted_utilization` with the proposed replicas running (empty when
    /// none is proposed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_utilization: Vec<f64>,
    /// The share of all workers' time spent on useful work when the busiest worker (the
    /// critical resource of the pipeline) is saturated: total work / (workers × busiest
    /// worker's time). 1 is a perfect split; 1 / workers is no parallelism at all.
    #[serde(default)]
    pub critical_path_utilization: f64,
    /// Total work over the busiest worker's time: the predicted speedup over one worker.
    #[serde(default)]
    pub predicted_speedup: f64,
    /// Ppts given a worker of their own.
    #[serde(default)]
    pub isolated: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_model: Option<CostSummary>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedNode {
    /// The node's index in the graph.
    pub id: u32,
    /// `op label`.
    #[serde(default)]
    pub name: String,
    pub worker: usize,
    /// The node's share of the total predicted work.
    #[serde(default)]
    pub predicted_load: f64,
}

/// A proposal to run a Ppt as several copies, each on its own worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replica {
    pub id: u32,
    #[serde(default)]
    pub name: String,
    /// Copies, the node itself included.
    pub replicas: u32,
    /// The node's share of the total predicted work (all copies together).
    #[serde(default)]
    pub predicted_load: f64,
    /// The worker of each copy, the node's own first: `(worker + r) mod workers`, where
    /// the executor puts copy `r`.
    #[serde(default)]
    pub workers: Vec<usize>,
}

/// Where the predictions came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostSummary {
    /// `model` (assumptions) or `profile` (measured counts and times).
    pub source: String,
    pub total_us_per_instance: f64,
    /// The busiest worker's time per instance, or the latency bound when it is larger.
    pub bottleneck_us_per_instance: f64,
    /// The latency bound: an instance's time through the nodes (and the wake-ups of the
    /// cuts) over the instances in flight, when a profile says how instances move; the
    /// bottleneck when it exceeds every worker's time. 0 without one.
    #[serde(default)]
    pub latency_us_per_instance: f64,
    /// Each worker's predicted time per instance, communication included.
    #[serde(default)]
    pub workers_us: Vec<f64>,
    /// With several processes (`assumptions.processes`), each process's link time per
    /// instance: the bytes it sends over the link (as many come back), over the bandwidth;
    /// the bottleneck when it exceeds every worker's time. Absent with one process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links_us: Vec<f64>,
    /// What the costs were estimated with, the link between processes included.
    pub assumptions: Assumptions,
}

/// Plans `graph` for `workers` workers with its costs.
pub fn plan(graph: &Verified, costs: &Costs, workers: usize) -> Result<Plan, PlanError> {
    check_workers(workers)?;
    check_processes(&costs.assumptions, workers)?;
    let topo = Topology::new(graph);
    check_costs(&topo, costs)?;
    let problem = Problem::new(costs, &topo, workers);
    let chosen = partition::partition(&problem);
    let isolated = chosen.isolated.iter().map(|&v| v as u32).collect();
    Ok(describe(graph, &problem, costs, &chosen.assign, isolated))
}

/// What the cost model predicts for a given placement (the worker of every node index,
/// holes included), e.g. the executor's default one. The members of a fused unit are
/// taken to run on its representative's worker, as the executor runs them.
pub fn evaluate(graph: &Verified, costs: &Costs, workers: usize, placement: &[usize]) -> Result<Plan, PlanError> {
    check_workers(workers)?;
    check_processes(&costs.assumptions, workers)?;
    let topo = Topology::new(graph);
    check_costs(&topo, costs)?;
    let mut assign = vec![0; topo.bound];
    for v in topo.nodes() {
        match placement.get(v) {
            Some(&w) if w < workers => assign[v] = w,
            Some(&w) => return Err(PlanError::WorkerOutOfRange { node: v as u32, worker: w, workers }),
            None => return Err(PlanError::Length { placed: placement.len(), nodes: topo.bound }),
        }
    }
    let problem = Problem::new(costs, &topo, workers);
    // The executor runs a fused unit where its first node is.
    problem.follow(&mut assign);
    Ok(describe(graph, &problem, costs, &assign, Vec::new()))
}

fn check_workers(workers: usize) -> Result<(), PlanError> {
    if workers == 0 || workers > MAX_WORKERS {
        return Err(PlanError::Workers { workers });
    }
    Ok(())
}

/// Every process runs at least one worker (as amprun requires).
fn check_processes(assumptions: &Assumptions, workers: usize) -> Result<(), PlanError> {
    if assumptions.processes > workers {
        return Err(PlanError::Processes { processes: assumptions.processes, workers });
    }
    Ok(())
}

fn check_costs(topo: &Topology, costs: &Costs) -> Result<(), PlanError> {
    if costs.nodes.len() != topo.bound || topo.nodes().any(|v| costs.nodes[v].is_none()) {
        return Err(PlanError::Costs);
    }
    Ok(())
}

fn describe(graph: &Graph, problem: &Problem, costs: &Costs, assign: &[usize], isolated: Vec<u32>) -> Plan {
    let workers = problem.workers;
    let total = problem.total;
    let share_of = |us: f64| if total > 0.0 { us / total } else { 0.0 };
    let topo = problem.topo;
    let count = topo.nodes().count().max(1);
    let nodes: Vec<PlannedNode> = topo
        .nodes()
        .map(|v| PlannedNode {
            id: v as u32,
            name: costs.node(v).map(|c| c.name.clone()).unwrap_or_default(),
            worker: assign[v],
            // With no work at all every node gets an equal share, so shares still sum to 1.
            predicted_load: if total > 0.0 { problem.own_load[v] / total } else { 1.0 / count as f64 },
        })
        .collect();
    let mut workers_load = vec![0.0; workers];
    for node in &nodes {
        workers_load[node.worker] += node.predicted_load;
    }
    let times = problem.worker_times(assign);
    let comm = problem.worker_comm(assign);
    // The pipeline goes as fast as its busiest worker, or its latency bound allows.
    let latency_bound = problem.bound(assign);
    let links = problem.link_times(assign);
    let busiest = times.iter().chain(&links).copied().fold(latency_bound, f64::max);
    let predicted_utilization: Vec<f64> =
        times.iter().map(|&t| if busiest > 0.0 { t / busiest } else { 1.0 }).collect();
    let (speedup, utilization) =
        if busiest > 0.0 { (total / busiest, total / busiest / workers as f64) } else { (1.0, 1.0) };
    let sync = replicas::sync_costs(graph, costs);
    let (copies, with_copies) = replicas::propose(problem, costs, &sync, assign);
    let mut replicas: Vec<Replica> = copies
        .into_iter()
        .map(|c| Replica {
            id: c.node as u32,
            name: costs.node(c.node).map(|n| n.name.clone()).unwrap_or_default(),
            replicas: c.workers.len() as u32,
            predicted_load: share_of(problem.load[c.node]),
            workers: c.workers,
        })
        .collect();
    replicas.sort_by(|a, b| b.predicted_load.total_cmp(&a.predicted_load).then(a.id.cmp(&b.id)));
    let busiest_with = with_copies.iter().chain(&links).copied().fold(0.0, f64::max);
    let replica_utilization: Vec<f64> = if replicas.is_empty() {
        Vec::new()
    } else {
        with_copies[..workers].iter().map(|&t| if busiest_with > 0.0 { t / busiest_with } else { 1.0 }).collect()
    };
    let replica_speedup = if replicas.is_empty() {
        speedup
    } else if busiest_with > 0.0 {
        total / busiest_with
    } else {
        1.0
    };
    Plan {
        workers,
        copies: 1,
        layouts: Vec::new(),
        nodes,
        workers_load,
        workers_comm: comm.iter().map(|&c| share_of(c)).collect(),
        predicted_utilization,
        replicas,
        replica_speedup,
        replica_utilization,
        critical_path_utilization: utilization,
        predicted_speedup: speedup,
        isolated,
        cost_model: Some(CostSummary {
            source: if costs.profiled { "profile" } else { "model" }.to_string(),
            total_us_per_instance: total,
            bottleneck_us_per_instance: busiest,
            latency_us_per_instance: latency_bound,
            workers_us: times,
            links_us: links,
            assumptions: costs.assumptions.clone(),
        }),
    }
}

fn one() -> usize {
    1
}

impl Plan {
    /// The plan as the JSON object `--emit plan` prints and the `.ampg` file stores.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Reads a plan from JSON (untrusted: check it with [`Plan::placement`] before use).
    pub fn from_json(value: &serde_json::Value) -> Result<Plan, PlanError> {
        Plan::deserialize(value).map_err(|e| PlanError::Json { message: e.to_string() })
    }

    /// The worker of every node index of `graph` (holes get 0), after checking that the
    /// plan fits the graph: a worker count in 1..=1024, every node of the graph placed
    /// exactly once, no node the graph lacks, every worker below the count, per-worker
    /// lists as long as the count, and the cost model's assumptions in range (processes
    /// no more than workers).
    pub fn placement(&self, graph: &Graph) -> Result<Vec<usize>, PlanError> {
        check_workers(self.workers)?;
        // The assumptions say which run the plan is for (amprun compares them with its own).
        if let Some(model) = &self.cost_model {
            model.assumptions.check()?;
            check_processes(&model.assumptions, self.workers)?;
        }
        for (field, len) in [
            ("workers_load", self.workers_load.len()),
            ("workers_comm", self.workers_comm.len()),
            ("predicted_utilization", self.predicted_utilization.len()),
            ("replica_utilization", self.replica_utilization.len()),
        ] {
            if len != 0 && len != self.workers {
                return Err(PlanError::FieldLength { field, len, workers: self.workers });
            }
        }
        let bound = graph.nodes.node_bound();
        let mut placement = vec![0; bound];
        let mut placed = vec![false; bound];
        for node in &self.nodes {
            let i = node.id as usize;
            if i >= bound || graph.nodes.node_weight(NodeIndex::new(i)).is_none() {
                return Err(PlanError::UnknownNode { node: node.id });
            }
            if node.worker >= self.workers {
                return Err(PlanError::WorkerOutOfRange { node: node.id, worker: node.worker, workers: self.workers });
            }
            if std::mem::replace(&mut placed[i], true) {
                return Err(PlanError::DuplicateNode { node: node.id });
            }
            placement[i] = node.worker;
        }
        let nodes = graph.nodes.node_count();
        if self.nodes.len() != nodes {
            return Err(PlanError::Length { placed: self.nodes.len(), nodes });
        }
        Ok(placement)
    }

    /// The proposed replicas as the executor takes them (node, copies), after checking
    /// them against `graph` and the placement (`Plan::placement`'s): each names a
    /// parameterised node (linear, embedding, affine) once, with 2 to 64 copies whose
    /// workers, when listed, are where the executor puts them (`(worker + r) mod
    /// workers`, from the node's own).
    pub fn replica_nodes(&self, graph: &Graph, placement: &[usize]) -> Result<Vec<(u32, usize)>, PlanError> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for r in &self.replicas {
            let refuse = |message: String| PlanError::Replica { node: r.id, message };
            let node = graph
                .nodes
                .node_weight(NodeIndex::new(r.id as usize))
                .ok_or_else(|| refuse("the graph has no such node".into()))?;
            if !node.op.is_ppt() {
                return Err(refuse(format!("a `{}` node has no parameters to copy", node.op.keyword())));
            }
            if !seen.insert(r.id) {
                return Err(refuse("proposed twice".into()));
            }
            let copies = r.replicas as usize;
            if !(2..=MAX_REPLICAS).contains(&copies) {
                return Err(refuse(format!("{copies} copies: a replicated node has 2 to {MAX_REPLICAS}")));
            }
            let worker = placement.get(r.id as usize).copied().unwrap_or(0);
            if !r.workers.is_empty() && r.workers != amp_ir::placement::copy_workers(worker, copies, self.workers) {
                return Err(refuse(format!(
                    "its copies' workers {:?} are not where the executor puts them, from worker {worker}",
                    r.workers
                )));
            }
            out.push((r.id, copies));
        }
        Ok(out)
    }

    /// The predicted speedup of the layout over one worker: the weighed layout's, or
    /// without copies the placement's.
    pub fn speedup(&self) -> f64 {
        self.layouts
            .iter()
            .find(|o| o.copies == self.copies && o.stage_workers == self.workers)
            .map_or(self.predicted_speedup, |o| o.predicted_speedup)
    }

    /// The layout in one line: `2 copies × 1 stage on 2 workers (predicted 1.93×)`, or,
    /// when the plan leaves a copy's workers without nodes, `1 copy × 1 stage on 2
    /// workers, 1 idle (predicted 1.00×)`.
    pub fn summary(&self) -> String {
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let speedup = self.speedup();
        // The stages are a copy's workers that have nodes: the plan may leave some idle.
        let mut used: Vec<usize> = self.nodes.iter().map(|n| n.worker).filter(|&w| w < self.workers).collect();
        used.sort_unstable();
        used.dedup();
        let stages = if used.is_empty() { self.workers } else { used.len() };
        let idle = self.copies * (self.workers - stages);
        format!(
            "{} × {} on {}{} (predicted {speedup:.2}×)",
            plural(self.copies, "copy", "copies"),
            plural(stages, "stage", "stages"),
            plural(self.copies * self.workers, "worker", "workers"),
            if idle > 0 { format!(", {idle} idle") } else { String::new() }
        )
    }

    /// A readable table: the layout weighed (when several were), every node with its
    /// worker and predicted share, then the per-worker totals, isolated Ppts and replica
    /// proposals.
    pub fn table(&self, model: &str) -> String {
        let mut out = String::new();
        if !self.layouts.is_empty() {
            let weighed: Vec<String> = self
                .layouts
                .iter()
                .map(|o| format!("{}×{} {:.2}×", o.copies, o.stage_workers, o.predicted_speedup))
                .collect();
            let _ = writeln!(out, "layout: {} (weighed, copies × stages: {})", self.summary(), weighed.join(", "));
        }
        let source = self.cost_model.as_ref().map_or("unknown", |c| c.source.as_str());
        let _ = writeln!(
            out,
            "plan for {model} on {} worker{}: predicted speedup {:.2}x, critical-path utilization {:.0}% (cost model: {source})",
            self.workers,
            if self.workers == 1 { "" } else { "s" },
            self.predicted_speedup,
            100.0 * self.critical_path_utilization
        );
        let width = self.nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).clamp(4, 48);
        let _ = writeln!(out, "  {:<7} {:<width$} {:>6} {:>7}", "node", "name", "worker", "load");
        for node in &self.nodes {
            let name: String = node.name.chars().take(width).collect();
            let _ = writeln!(
                out,
                "  {:<7} {:<width$} {:>6} {:>6.1}%",
                format!("%{}", node.id),
                name,
                node.worker,
                100.0 * node.predicted_load
            );
        }
        let _ =
            writeln!(out, "  {:<7} {:>7} {:>7} {:>12} {:>12}", "worker", "work", "comm", "utilization", "us/instance");
        for w in 0..self.workers {
            let at = |v: &[f64]| v.get(w).copied().unwrap_or(0.0);
            let us = self.cost_model.as_ref().map_or(0.0, |c| at(&c.workers_us));
            let _ = writeln!(
                out,
                "  {:<7} {:>6.1}% {:>6.1}% {:>11.1}% {:>12.1}",
                w,
                100.0 * at(&self.workers_load),
                100.0 * at(&self.workers_comm),
                100.0 * at(&self.predicted_utilization),
                us
            );
        }
        if let Some(c) = self.cost_model.as_ref().filter(|c| c.latency_us_per_instance > 0.0) {
            let busiest = c.workers_us.iter().copied().fold(0.0, f64::max);
            let binds =
                if c.latency_us_per_instance > busiest { ", above every worker's: it limits the speedup" } else { "" };
            let _ = writeln!(
                out,
                "  latency bound {:.1} us/instance (an instance's time in its steps and wake-ups over the instances in flight){binds}",
                c.latency_us_per_instance
            );
        }
        if let Some(c) = self.cost_model.as_ref().filter(|c| c.assumptions.processes > 1) {
            let a = &c.assumptions;
            let links: Vec<String> = c.links_us.iter().map(|us| format!("{us:.1}")).collect();
            let _ = writeln!(
                out,
                "  {} processes, link {} us one way, {} Mb/s: each link's us/instance {}",
                a.processes,
                a.link_latency_us,
                a.link_bandwidth_mbps,
                links.join(" / ")
            );
        }
        let name_of = |id: u32| self.nodes.iter().find(|n| n.id == id).map_or(String::new(), |n| n.name.clone());
        if !self.isolated.is_empty() {
            let list: Vec<String> = self.isolated.iter().map(|&id| format!("%{id} {}", name_of(id))).collect();
            let _ = writeln!(out, "  own worker: {}", list.join(", "));
        }
        if self.replicas.is_empty() {
            let _ = writeln!(out, "  replicas: none predicted to pay");
        } else {
            for r in &self.replicas {
                let on: Vec<String> = r.workers.iter().map(usize::to_string).collect();
                let _ = writeln!(
                    out,
                    "  replicas: %{} {} x{} on workers {} (its load {:.1}%)",
                    r.id,
                    r.name,
                    r.replicas,
                    on.join(", "),
                    100.0 * r.predicted_load
                );
            }
            let _ = writeln!(
                out,
                "  with these replicas (amprun --plan-replicas): predicted speedup {:.2}x",
                self.replica_speedup
            );
        }
        out
    }
}
