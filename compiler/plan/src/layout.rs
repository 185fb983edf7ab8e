//! How to use N workers: `k` copies of the whole graph, each placed by the plan for `s`
//! workers, with `k × s = N` (`k = 1`: stage placement alone; `s = 1`: data parallelism
//! alone; both: hybrids). The executor runs copies as `amp_exec`'s `ExecConfig::copies`
//! and `amp_ir::placement::graph_copy_worker` places them.
//!
//! The prediction for `k × s`, per instance of the whole run (µs):
//!
//! ```text
//!   worker w of copy c:  (time_w − update_w + steps_w) / k      its share of the instances
//!                      + [c = 0] · (update_w + gather_w + ends_w) copy 0's owners update for all
//!                      + [c > 0] · elements_w / (update_every · copy rate)
//!   gather_w = (k − 1) · elements_w / (update_every · copy rate)
//!   bottleneck = max(every worker's time, the latency bound / k)
//! ```
//!
//! `time_w` is the `s`-worker plan's time of worker `w` (work and its cut edges),
//! `steps_w` what the steps that copies add cost its nodes: a step that served `J`
//! instances together serves `J / k` in each copy (at least one), so a node takes
//! `min(k, J)` times as many steps, and each pays again the part of a step that does not
//! shrink with its rows (a profile's fit, `NodeCost::forward_fixed_us`; an MLP's Linear
//! step took about as long on 4 rows as on 8), `ends_w = (k − 1) / k · cross_us` on an
//! owner (every instance that ends on another copy tells each owner with a message,
//! `ToWorker::InstanceDone`),
//! `update_w` the optimizer updates of the groups it owns, `elements_w` their parameter
//! elements: before each update, each other copy's gradients are added into the owner's
//! (one pass each, at the rate of a plain SGD update), and after it each other copy's
//! worker copies the new values into its own (amp_exec's `take_values`), so copy 0's
//! workers stay the busiest. Synchronous training (`Assumptions::synchronous`, amprun's
//! default) adds `stall = 2 · wake_us / update_every` to the bottleneck with copies: at
//! each boundary the owner waits, idle, for the last end on another copy, and the copies,
//! idle, for the window the owner opens after its update, each a thread woken. The
//! latency bound (an instance's time in its nodes' steps over the instances in flight,
//! from a profile) shrinks with the copies: each copy holds `1/k` of the instances in
//! flight, so its steps serve `1/k` as many together and last `1/k` as long (a step's
//! length is what an instance waits in it); by Little's law each copy then starts an
//! instance every `latency / in flight`, as the whole run did, and the `k` copies `k` times
//! as often. The predicted speedup is the one-worker time over the bottleneck;
//! the layout with the highest wins, the one with fewer copies on a tie within 2%.
//!
//! Split over `P` processes, `k` is a multiple of `P` (each copy in one process) or 1
//! (the stages' plan over every process, links included). Each process adds up its own
//! `k / P` copies' gradients, all-reduces the sums with the others around a ring, and
//! applies the update itself (amp_exec's `sched::worker::ring`):
//!
//! ```text
//!   gather_w = 2 · (k / P) · elements_w / (update_every · copy rate)
//!   ends_w   = (k / P − 1) / k · cross_us          the ends on the process's other copies
//!   ring_w   = 2 · (P − 1) / P · elements_w / (update_every · elementwise rate)
//!            + 2 · (P − 1) · link message cost / update_every
//!   link     = 2 · (P − 1) / P · 4 · elements / update_every / link bandwidth
//!   stall    = (2P − 1) · (link latency + 2 · wake-up) / update_every
//! ```
//!
//! `ring_w` (the chunks added and copied) joins each process's first copy's worker `w`;
//! `link` (the bytes each process sends per instance) bounds the run like a worker; and
//! `stall` is added to the bottleneck in synchronous training, which waits at each update
//! for the ring's 2(P − 1) steps and the acknowledgement, each crossing the link and waking
//! the receiving process's bridge and updater (with P = 1, the two wake-ups above).

use crate::cost::{Costs, NodeCost, SGD_UPDATE_SPEEDUP};
use crate::plan::{evaluate, plan, Plan};
use crate::PlanError;
use amp_ir::verify::Verified;
use serde::{Deserialize, Serialize};

/// One way to use the workers, as the planner predicted it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutOption {
    /// Copies of the whole graph.
    pub copies: usize,
    /// Workers of one copy: its stages.
    pub stage_workers: usize,
    /// The one-worker time over this layout's bottleneck.
    pub predicted_speedup: f64,
    /// The busiest worker's µs per instance of the run (or the latency bound).
    pub bottleneck_us_per_instance: f64,
}

/// Layouts whose speedups differ by less than this share count as a tie.
const TIE: f64 = 0.02;

/// Plans `workers` workers: the best of `k` copies × the plan for `workers / k`, for every
/// `k` dividing `workers` (split over processes, 1 and the multiples of the processes), or
/// for `copies` alone when given (a user's choice, predicted the same way). The plan
/// returned is for one copy's workers, with `copies` and the options weighed set.
pub fn plan_layout(graph: &Verified, costs: &Costs, workers: usize, copies: Option<usize>) -> Result<Plan, PlanError> {
    let processes = costs.assumptions.processes.max(1);
    let local = within_a_copy(costs);
    let (single, one_worker) = one_worker(graph, &local)?;
    let mut options = Vec::new();
    let mut best: Option<(f64, Plan)> = None;
    let fits = |k: usize| {
        workers.is_multiple_of(k) && (k == 1 || k.is_multiple_of(processes)) && copies.is_none_or(|c| c == k)
    };
    for copies in (1..=workers).filter(|&k| fits(k)) {
        let stage_workers = workers / copies;
        let (stage, bottleneck) = if copies == 1 && processes > 1 {
            let stage = plan(graph, costs, workers)?;
            let bottleneck = stage.cost_model.as_ref().map_or(0.0, |c| c.bottleneck_us_per_instance);
            (stage, bottleneck)
        } else {
            let stage = if stage_workers == 1 { single.clone() } else { plan(graph, &local, stage_workers)? };
            let bottleneck = bottleneck_us(&stage, costs, copies);
            (stage, bottleneck)
        };
        let option = layout_option(one_worker, bottleneck, copies, stage_workers);
        let speedup = option.predicted_speedup;
        options.push(option);
        if best.as_ref().is_none_or(|(b, _)| speedup > b * (1.0 + TIE)) {
            best = Some((speedup, Plan { copies, ..stage }));
        }
    }
    let (_, mut chosen) = best.ok_or(PlanError::Workers { workers })?;
    chosen.layouts = options;
    Ok(chosen)
}

/// What the cost model predicts for a given placement of one copy's `workers / copies`
/// workers (the worker of every node index, as [`evaluate`] takes it) with `copies` copies
/// of the graph: the layout's prediction, as [`plan_layout`] makes it for the plan's own
/// placement. What `amprun --plan naive` or `round-robin` with `--copies` runs.
pub fn evaluate_layout(
    graph: &Verified,
    costs: &Costs,
    workers: usize,
    copies: usize,
    placement: &[usize],
) -> Result<Plan, PlanError> {
    let copies = copies.max(1);
    if copies == 1 {
        return evaluate(graph, costs, workers, placement);
    }
    let stage_workers = workers / copies;
    let local = within_a_copy(costs);
    let (_, one_worker) = one_worker(graph, &local)?;
    let stage = evaluate(graph, &local, stage_workers, placement)?;
    let option = layout_option(one_worker, bottleneck_us(&stage, costs, copies), copies, stage_workers);
    Ok(Plan { copies, layouts: vec![option], ..stage })
}

/// A copy's workers run in one process: its stages are planned without links.
fn within_a_copy(costs: &Costs) -> Costs {
    Costs { assumptions: costs.assumptions.within_a_copy(), ..costs.clone() }
}

/// The plan of one worker and its µs per instance: what every layout's speedup is over.
fn one_worker(graph: &Verified, local: &Costs) -> Result<(Plan, f64), PlanError> {
    let single = plan(graph, local, 1)?;
    let us = single.cost_model.as_ref().map_or(0.0, |c| c.bottleneck_us_per_instance);
    Ok((single, us))
}

fn layout_option(one_worker_us: f64, bottleneck_us: f64, copies: usize, stage_workers: usize) -> LayoutOption {
    let speedup = if bottleneck_us > 0.0 { one_worker_us / bottleneck_us } else { copies as f64 };
    LayoutOption { copies, stage_workers, predicted_speedup: speedup, bottleneck_us_per_instance: bottleneck_us }
}

/// The busiest worker's µs per instance of the run (or the latency bound) with `copies`
/// copies of `stage`, as the module doc counts it.
fn bottleneck_us(stage: &Plan, costs: &Costs, copies: usize) -> f64 {
    let Some(model) = stage.cost_model.as_ref() else { return 0.0 };
    let k = copies as f64;
    let a = &costs.assumptions;
    let p = a.processes.max(1) as f64;
    let every = a.update_every.max(1.0);
    let rate = SGD_UPDATE_SPEEDUP * a.update_elements_per_us * every;
    // Passes over a group's parameters per update by its owner in each process: in one,
    // the other copies' gradients gathered (each copy takes the values itself); over
    // several, gathers and values given back. And the share of them each process sends
    // around the ring.
    let (passes, ring_share) = if p > 1.0 { (2.0 * k / p, 2.0 * (p - 1.0) / p) } else { (k - 1.0, 0.0) };
    let mut update = vec![0.0; stage.workers];
    let mut elements = vec![0.0; stage.workers];
    let mut more_steps = vec![0.0; stage.workers];
    // `stage.nodes` lists the graph's nodes, `costs.nodes` is by index (holes included).
    for node in &stage.nodes {
        let Some(cost) = costs.nodes.get(node.id as usize).and_then(Option::as_ref) else { continue };
        if let (Some(u), Some(e), Some(f)) =
            (update.get_mut(node.worker), elements.get_mut(node.worker), more_steps.get_mut(node.worker))
        {
            *u += cost.update_us;
            *e += cost.update_elements;
            *f += extra_steps_us(cost, k);
        }
    }
    // Each instance that ends on another copy in the owner's process tells each of copy 0's
    // owners (`ToWorker::InstanceDone`): a crossing each, paid on the owner's side.
    let ends = a.cross_us * (k / p - 1.0).max(0.0) / k;
    let busiest = model
        .workers_us
        .iter()
        .enumerate()
        .map(|(w, &time)| {
            let (u, e) = (update.get(w).copied().unwrap_or(0.0), elements.get(w).copied().unwrap_or(0.0));
            let steps = more_steps.get(w).copied().unwrap_or(0.0);
            let ring = ring_share * e / (a.elements_per_us * every) + ring_share * p * a.link_message_us / every;
            let owner = if e > 0.0 { ring + ends } else { 0.0 };
            ((time - u).max(0.0) + steps) / k + u + passes * e / rate + owner
        })
        .fold(0.0, f64::max);
    // Megabits per second are bits per µs.
    let link = ring_share * 4.0 * elements.iter().sum::<f64>() * 8.0 / (every * a.link_bandwidth_mbps.max(1e-9));
    let link_latency = if p > 1.0 { a.link_latency_us } else { 0.0 };
    let stall = if a.synchronous && k > 1.0 { (2.0 * p - 1.0) * (link_latency + 2.0 * a.wake_us) / every } else { 0.0 };
    busiest.max(model.latency_us_per_instance / k).max(model.links_us.iter().copied().fold(0.0, f64::max)).max(link)
        + stall
}

/// The µs per instance of the run that `copies` copies add at one node, all copies
/// together: each copy holds `1/k` of the instances in flight, so a step that served `J`
/// of them together serves `J/k` (at least one), and the node takes up to `k` times as
/// many steps, each paying its fixed part again (`NodeCost::forward_fixed_us`).
fn extra_steps_us(cost: &NodeCost, copies: f64) -> f64 {
    let more = |steps: f64, joined: f64, fixed: f64| {
        if steps <= 0.0 || fixed <= 0.0 {
            return 0.0;
        }
        let together = (joined / steps).max(1.0);
        steps * fixed * (copies.min(together) - 1.0).max(0.0)
    };
    let extra = more(cost.forward_messages, cost.forward_joined, cost.forward_fixed_us)
        + more(cost.backward_messages, cost.backward_joined, cost.backward_fixed_us);
    if extra.is_finite() {
        extra
    } else {
        0.0
    }
}
