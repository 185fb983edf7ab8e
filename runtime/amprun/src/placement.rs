//! Which worker runs which node, and how well the workers were used.
//!
//! `--plan auto` (the default) follows the partition plan: the `.ampg` file's when it was
//! made for this many workers, else one planned here by `amp-plan` from the cost model
//! (with `--min-update-frequency` as the update period, refined by `--plan-profile`).
//! `--plan naive` keeps the executor's contiguous ranges, `--plan round-robin` deals the
//! nodes out in turn; the cost model still predicts what those placements do.
//!
//! Measured utilization is each worker's busy time over the wall time of the training
//! calls: the time it did not spend waiting for messages with nothing queued (its ops,
//! the routing and queueing around them, its updates), as the plan's per-message costs
//! count it. The executor measures the waits with two clock reads each; the trace (which
//! costs two per message) is needed only for the profile.

use crate::batches::BatchSizes;
use crate::cli::{ExecArgs, PlanChoice};
use crate::failure::Failure;
use amp_exec::config::NodeSelector;
use amp_exec::{Executor, Placement, TraceEvent, TraceKind};
use amp_ir::verify::Verified;
use amp_ir::Graph;
use amp_params::{OptimConfig, OptimizerKind};
use amp_plan::{Assumptions, Event, Plan, Profile, ProfileCounter, Work};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// The placement a run uses and what the cost model predicts for it.
pub struct Choice {
    pub placement: Placement,
    /// The plan followed, or (for `naive` and `round-robin`, after [`Choice::predict`]) the
    /// cost model's view of the executor's placement.
    pub plan: Option<Plan>,
    /// `plan (file.ampg)`, `plan`, `naive`, `round-robin`.
    pub source: String,
    /// The plan's replicas the run adds (`--plan-replicas`): node and copies.
    pub replicas: Vec<(NodeSelector, usize)>,
    /// Copies of the whole graph (`--copies`, or the plan's layout); `placement` places
    /// one copy on `workers / copies` workers.
    pub copies: usize,
    workers: usize,
    assumptions: Assumptions,
    profile: Option<Profile>,
}

/// What the cost model assumes of a run that updates every `update_every` instances with
/// `optimizer` (`None`: a run that never updates), synchronously or not (`--async`).
pub fn assumptions(update_every: u64, optimizer: Option<&OptimConfig>, synchronous: bool) -> Assumptions {
    let plain_sgd = optimizer.is_none_or(|o| o.kind == OptimizerKind::Sgd && o.weight_decay == 0.0);
    Assumptions { update_every: update_every.max(1) as f64, plain_sgd, synchronous, ..Assumptions::default() }
}

/// Chooses the placement for `graph` on `exec.workers` workers.
pub fn choose(
    graph: &Verified,
    stored: Option<&Plan>,
    exec: &ExecArgs,
    model_path: &Path,
    assumptions: Assumptions,
) -> Result<Choice, Failure> {
    let workers = exec.workers();
    let assumptions = with_link(assumptions, exec)?;
    let profile = exec.plan_profile.as_deref().map(read_profile).transpose()?;
    if exec.plan_replicas && exec.plan != PlanChoice::Auto {
        return Err(Failure::usage("--plan-replicas runs the plan's replicas: it goes with `--plan auto`"));
    }
    let forced = exec.copies.map(usize::from);
    if let Some(k) = forced.filter(|k| !workers.is_multiple_of(*k)) {
        return Err(Failure::usage(format!("--copies {k} must divide --workers {workers}")));
    }
    if forced.is_some_and(|k| k > 1) && (exec.plan_replicas || !exec.replicate.is_empty()) {
        return Err(Failure::usage("--copies runs copies of the whole graph: it cannot go with node replicas"));
    }
    let processes = exec.processes.map_or(1, usize::from);
    if let Some(k) = forced.filter(|&k| k > 1 && !k.is_multiple_of(processes)) {
        return Err(Failure::usage(format!(
            "--copies {k} must be a multiple of --processes {processes}: each copy runs in one process"
        )));
    }
    // Node replicas keep one copy; otherwise `--plan auto` weighs copies against stages.
    let weigh_copies = forced.is_none() && !exec.plan_replicas && exec.replicate.is_empty();
    let mut choice = Choice {
        placement: Placement::Contiguous,
        plan: None,
        source: String::new(),
        replicas: Vec::new(),
        copies: forced.unwrap_or(1),
        workers,
        assumptions,
        profile,
    };
    match exec.plan {
        PlanChoice::Naive => choice.source = "naive".into(),
        PlanChoice::RoundRobin => {
            choice.placement = Placement::RoundRobin;
            choice.source = "round-robin".into();
        }
        PlanChoice::Auto => {
            let same_run = |p: &&Plan| {
                p.cost_model.as_ref().is_none_or(|c| {
                    c.assumptions.update_every == choice.assumptions.update_every
                        && c.assumptions.plain_sgd == choice.assumptions.plain_sgd
                        && c.assumptions.synchronous == choice.assumptions.synchronous
                        && c.assumptions.worker_speed == choice.assumptions.worker_speed
                        && same_link(&c.assumptions, &choice.assumptions)
                })
            };
            let fits = |p: &&Plan| match forced {
                Some(k) => p.copies == k && p.workers * k == workers,
                None => p.workers * p.copies == workers && (weigh_copies || p.copies == 1),
            };
            let usable = stored.filter(|p| fits(p) && choice.profile.is_none() && same_run(p));
            let plan = match usable {
                Some(plan) => {
                    choice.source = format!("plan ({})", model_path.display());
                    plan.clone()
                }
                None => {
                    if let Some(other) = stored.filter(|p| !fits(p)) {
                        eprintln!(
                            "amprun: note: `{}` holds a plan for {}; planning for {workers} workers in-process",
                            model_path.display(),
                            other.summary()
                        );
                    } else if stored.is_some_and(|p| !same_run(&p)) && choice.profile.is_none() {
                        eprintln!(
                            "amprun: note: `{}` holds a plan for another training setup (see `ampc compile \
                             --min-update-frequency`, `--optimizer`, `--processes` and the link's \
                             flags); planning in-process",
                            model_path.display()
                        );
                    }
                    choice.source = "plan".into();
                    let (assumptions, profile) = (&choice.assumptions, choice.profile.as_ref());
                    let planned = match forced {
                        _ if weigh_copies => amp_plan::plan_workers(graph, workers, assumptions, profile),
                        // The layout the user chose, predicted as the planner weighs it.
                        Some(k) => amp_plan::plan_copies(graph, workers, k, assumptions, profile),
                        None => amp_plan::plan_graph(graph, workers, assumptions, profile),
                    };
                    planned.map_err(|e| plan_failure(&e))?
                }
            };
            choice.copies = plan.copies;
            let placement = plan.placement(graph).map_err(|e| plan_failure(&e))?;
            let idle: Vec<String> = (0..plan.workers)
                .filter(|w| !plan.nodes.iter().any(|n| n.worker == *w))
                .map(|w| w.to_string())
                .collect();
            if !idle.is_empty() {
                eprintln!(
                    "amprun: note: the plan leaves worker(s) {} without nodes: on this model, more workers would \
                     cost more in messages between them than they take over (`--plan naive` or `round-robin` \
                     split it anyway)",
                    idle.join(", ")
                );
            }
            if exec.plan_replicas {
                choice.replicas = plan_replicas(graph, &plan, &placement, &exec.replicate)?;
            }
            choice.placement = Placement::Explicit(placement);
            choice.plan = Some(plan);
        }
    }
    Ok(choice)
}

impl Choice {
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The layout in one line (`2 copies × 1 stage on 2 workers (predicted 1.93×)`) and
    /// where the placement came from.
    pub fn summary(&self) -> String {
        match &self.plan {
            Some(plan) => format!("{}, {}", plan.summary(), self.source),
            None => format!("{} on {} worker(s)", self.source, self.workers),
        }
    }

    /// `plan`'s predicted utilization per worker, with its replicas when the run adds them;
    /// with copies, each copy's workers as copy 0's.
    fn predicted_utilization(&self, plan: &Plan) -> Vec<f64> {
        let per_stage = if self.replicas.is_empty() || plan.replica_utilization.len() != self.workers {
            &plan.predicted_utilization
        } else {
            &plan.replica_utilization
        };
        (0..self.workers).filter_map(|w| per_stage.get(w % plan.workers.max(1)).copied()).collect()
    }

    /// For the executor's own placements, what the cost model predicts for them.
    pub fn predict(&mut self, graph: &Verified, executor: &Executor) -> Result<(), Failure> {
        if self.plan.is_some() {
            return Ok(());
        }
        // Copy 0's nodes: the graph's (those a fused kernel or chain runs on its worker).
        let nodes = graph.nodes.node_indices().map(|i| i.index() + 1).max().unwrap_or(0);
        let placement: Vec<usize> =
            executor.graph_placement().into_iter().take(nodes).map(|w| w.unwrap_or(0)).collect();
        let costs =
            amp_plan::estimate(graph, &self.assumptions, self.profile.as_ref()).map_err(|e| plan_failure(&e))?;
        let plan = amp_plan::evaluate_layout(graph, &costs, self.workers, self.copies, &placement);
        self.plan = Some(plan.map_err(|e| plan_failure(&e))?);
        Ok(())
    }
}

/// The plan's replicas as the executor takes them, less the nodes `--replicate` names
/// (the user's count wins); a stored plan's are checked first.
fn plan_replicas(
    graph: &Graph,
    plan: &Plan,
    placement: &[usize],
    named: &[(NodeSelector, u64)],
) -> Result<Vec<(NodeSelector, usize)>, Failure> {
    let nodes = plan.replica_nodes(graph, placement).map_err(|e| plan_failure(&e))?;
    let label = |id: u32| {
        graph.nodes.node_indices().find(|i| i.index() == id as usize).and_then(|i| graph.nodes.node_weight(i))
    };
    let by_user = |id: u32| {
        named.iter().any(|(s, _)| match s {
            NodeSelector::Id(n) => *n == id,
            NodeSelector::Label(l) => label(id).is_some_and(|n| n.label == *l),
        })
    };
    Ok(nodes.into_iter().filter(|&(id, _)| !by_user(id)).map(|(id, r)| (NodeSelector::Id(id), r)).collect())
}

/// The planner's assumptions with this run's processes, the link between them
/// (`--link-latency-us`, `--link-bandwidth-mbps`) and its instances in flight; a value
/// the planner refuses (a bandwidth of 0) is a usage error.
fn with_link(assumptions: Assumptions, exec: &ExecArgs) -> Result<Assumptions, Failure> {
    let defaults = Assumptions::default();
    let assumptions = Assumptions {
        processes: exec.processes.map_or(1, usize::from).max(1),
        link_latency_us: exec.link_latency_us.unwrap_or(defaults.link_latency_us),
        link_bandwidth_mbps: exec.link_bandwidth_mbps.unwrap_or(defaults.link_bandwidth_mbps),
        // The run's default in flight is its update size (train) or the default one.
        in_flight: exec.in_flight(assumptions.update_every as u64) as f64,
        ..assumptions
    };
    assumptions.check().map_err(|e| Failure::usage(format!("the planner's link: {e}")))?;
    Ok(assumptions)
}

/// Whether a stored plan was made for this run's processes and link (the link and the
/// instances in flight matter only between processes).
fn same_link(stored: &Assumptions, run: &Assumptions) -> bool {
    stored.processes == run.processes
        && (run.processes == 1
            || (stored.link_latency_us == run.link_latency_us
                && stored.link_bandwidth_mbps == run.link_bandwidth_mbps
                && stored.link_message_us == run.link_message_us
                && stored.in_flight == run.in_flight))
}

fn plan_failure(error: &amp_plan::PlanError) -> Failure {
    Failure::bad_input(format!("cannot place the nodes: {error}"))
}

fn read_profile(path: &Path) -> Result<Profile, Failure> {
    let bytes = amp_ir::limits::read_bounded(path, amp_ir::limits::MAX_GRAPH_BYTES);
    let text = bytes
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
        .map_err(|e| Failure::io("read", path, &e))?;
    Profile::from_json(&text)
        .map_err(|e| Failure::bad_input(format!("`{}` is not a planner profile: {e}", path.display())))
}

/// Busy time per worker and per node, from the executor's trace events.
pub struct Measure {
    busy_s: Vec<f64>,
    wall_s: f64,
    profile: ProfileCounter,
    /// The graph nodes each fused node (`Executor::fused_nodes`) or replica stands for:
    /// the profile, which is over the graph's nodes, shares the call's time among them.
    fused: HashMap<u32, Vec<u32>>,
    in_flight: usize,
    instances: u64,
    batches: BatchSizes,
}

impl Measure {
    /// A measure of runs on `workers` workers with `in_flight` instances in flight.
    pub fn new(workers: usize, in_flight: usize, fused: Vec<(u32, Vec<u32>)>) -> Measure {
        let fused = fused.into_iter().collect();
        Measure {
            busy_s: vec![0.0; workers],
            wall_s: 0.0,
            profile: ProfileCounter::default(),
            fused,
            in_flight,
            instances: 0,
            batches: BatchSizes::default(),
        }
    }

    /// One training run over `instances` instances that took `wall_s`, and each worker's
    /// time waiting for messages (empty when the run failed); its trace events go to
    /// [`Measure::record_events`].
    pub fn record_run(&mut self, instances: usize, wall_s: f64, waited: &[Duration]) {
        for (busy, wait) in self.busy_s.iter_mut().zip(waited) {
            *busy += (wall_s - wait.as_secs_f64()).max(0.0);
        }
        self.profile.add_instances(instances as u64, wall_s);
        self.instances += instances as u64;
        self.wall_s += wall_s;
    }

    /// Trace events of a run, folded into the profile (a fused node's time shared among
    /// its members).
    pub fn record_events(&mut self, events: &[TraceEvent]) {
        self.batches.record(events);
        for e in events {
            let work = match e.kind {
                TraceKind::Forward => Work::Forward,
                TraceKind::Backward => Work::Backward,
                TraceKind::Update => Work::Update,
            };
            let event = |node, dur_ns| Event {
                node,
                work,
                dur_ns,
                messages: u64::from(e.batch),
                instances: u64::from(e.instances),
                rows: u64::from(e.rows),
            };
            match self.fused.get(&e.node).filter(|m| !m.is_empty()) {
                Some(members) => {
                    for &m in members {
                        self.profile.add(event(m, e.dur_ns / members.len() as u64));
                    }
                }
                None => self.profile.add(event(e.node, e.dur_ns)),
            }
        }
    }

    /// Each worker's busy time over the wall time.
    pub fn utilization(&self) -> Vec<f64> {
        self.busy_s.iter().map(|&b| if self.wall_s > 0.0 { b / self.wall_s } else { 0.0 }).collect()
    }

    pub fn busy_s(&self) -> Vec<f64> {
        self.busy_s.clone()
    }

    pub fn wall_s(&self) -> f64 {
        self.wall_s
    }

    pub fn profile(&self, graph: &Graph) -> Profile {
        self.profile.finish(graph, self.busy_s.len(), self.in_flight as u64)
    }

    /// The profile file: the planner's [`Profile`], the batch sizes (`batches`) and where
    /// the time went (`time`, see `crate::batches`), which the planner does not read.
    pub fn profile_json(&self, graph: &Graph) -> Value {
        let mut value = self.profile(graph).to_json();
        if let Some(object) = value.as_object_mut() {
            object.insert("batches".to_string(), self.batches.to_json(graph, &self.fused));
            let time = self.batches.time_json(graph, &self.fused, (self.instances, self.wall_s), &self.busy_s);
            object.insert("time".to_string(), time);
        }
        value
    }

    /// Rows per call by kind of node, for the summary (see `crate::batches`).
    pub fn batch_lines(&self, graph: &Graph) -> Vec<String> {
        self.batches.summary_lines(graph, &self.fused)
    }

    /// Where the time went, per instance, for the summary (see `crate::batches`).
    pub fn time_line(&self, graph: &Graph) -> String {
        self.batches.time_line(graph, &self.fused, (self.instances, self.wall_s), &self.busy_s)
    }
}

/// The metrics object of the placement: `split: "plan"`, the workers, where the placement
/// came from, predicted and (when measured) measured utilization per worker.
pub fn report_json(choice: &Choice, measure: Option<&Measure>, epoch: u64, elapsed_s: f64) -> Value {
    let mut object = json!({
        "split": "plan",
        "epoch": epoch,
        "workers": choice.workers,
        "placement": choice.source,
        "elapsed_s": finite(elapsed_s),
    });
    if let Some(plan) = &choice.plan {
        object["predicted_utilization"] =
            json!(choice.predicted_utilization(plan).iter().map(|&u| finite(u)).collect::<Vec<_>>());
        object["predicted_speedup"] = finite(plan.speedup());
        object["copies"] = json!(plan.copies);
        if !choice.replicas.is_empty() {
            object["replicated_nodes"] = json!(choice
                .replicas
                .iter()
                .filter_map(|(s, r)| match s {
                    NodeSelector::Id(id) => Some(json!({"id": id, "replicas": r})),
                    NodeSelector::Label(_) => None,
                })
                .collect::<Vec<_>>());
            object["predicted_speedup"] = finite(plan.replica_speedup);
        }
        object["critical_path_utilization"] = finite(plan.critical_path_utilization);
    }
    if let Some(m) = measure {
        object["measured_utilization"] = json!(m.utilization().into_iter().map(finite).collect::<Vec<_>>());
        object["busy_s"] = json!(m.busy_s().into_iter().map(finite).collect::<Vec<_>>());
        object["wall_s"] = finite(m.wall_s());
    }
    object
}

/// The summary's lines about the placement.
pub fn summary_lines(choice: &Choice, measure: Option<&Measure>) -> Vec<String> {
    let mut lines = Vec::new();
    let predicted = choice.plan.as_ref().map(|p| choice.predicted_utilization(p)).unwrap_or_default();
    let speedup = choice.plan.as_ref().map_or(String::new(), |p| {
        if choice.replicas.is_empty() && p.copies > 1 {
            format!(", {} copies of the graph, predicted speedup {:.2}x", p.copies, p.speedup())
        } else if choice.replicas.is_empty() {
            format!(", predicted speedup {:.2}x", p.predicted_speedup)
        } else {
            format!(", {} node(s) replicated, predicted speedup {:.2}x", choice.replicas.len(), p.replica_speedup)
        }
    });
    lines.push(format!("placement   {} on {} worker(s){speedup}", choice.source, choice.workers));
    let measured = measure.map(Measure::utilization);
    for w in 0..choice.workers {
        let p = predicted.get(w).map_or("-".to_string(), |u| format!("{:.0}%", 100.0 * u));
        let m = match &measured {
            Some(m) => format!("{:.0}%", 100.0 * m.get(w).copied().unwrap_or(0.0)),
            None => "(--report-utilization)".to_string(),
        };
        lines.push(format!("worker {w:<4} predicted {p:>4} measured {m}"));
    }
    lines
}

fn finite(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}
