//! The partition planner: a cost model per node, and the placement of a graph's nodes on
//! `N` workers (SPEC §5 "Partition plan").
//!
//! In: a verified graph (`amp_ir::verify::Verified`), [`Assumptions`] (defaults, or amprun's settings) and
//! optionally a [`Profile`] measured by `amprun train --profile`. Out: [`Costs`] (µs of
//! work per instance for every node, traffic and cut cost for every edge) and a [`Plan`]
//! (the worker of every node, predicted loads and utilisation, replica proposals) as JSON
//! and as a table. Pure: no files, no terminal. Depends on `amp-ir`, petgraph (strongly
//! connected components) and serde.
//!
//! Pipeline: `verify → Verified → estimate → Costs → plan → Plan → Plan::placement → Vec<usize>`
//! (what `amp_exec::Placement::Explicit` takes). A plan read from a file goes through
//! [`Plan::from_json`] and [`Plan::placement`], which refuse one that does not fit the
//! graph.
//!
//! - `flow`: expected messages per instance on every port (rates through loops,
//!   collections, routing and tree traversals; the assumptions fill in what the data
//!   decides).
//! - `cost`: FLOPs, bytes and µs per message; node loads and edge cut costs.
//! - `profile`: the measured counts and times that replace the modelled ones.
//! - `partition`: the search (objective and algorithm in its header).
//! - `replicas`: which Ppts are predicted to pay as copies on several workers (what a
//!   copy takes over, the crossings it adds, keeping it in sync), proposed in the plan.
//! - `plan`: the plan type, its JSON, its checks and its table.
//!
//! The default assumptions: loops whose bound comes from the data run 8 times,
//! collections of data-dependent length have 8 elements, a tree has 31 nodes (16
//! leaves), parameters update after every instance with Adam or momentum (amprun passes
//! its `--min-update-frequency` and whether it runs plain SGD); a message costs 0.4 µs at
//! its node besides its work (a worker step: nothing for a routing node that runs in its
//! producer's chain on the same worker), dense products run at 50 GFLOP/s (batched
//! GEMMs), other ops touch 2,000 elements per µs and those inside a fused kernel 1,000 (an op
//! that evaluates an index or arm per row of a batch, such as `gather_rows`, 0.12 µs per
//! row besides), an optimizer update
//! 600 parameter elements per µs (plain SGD four times that), and a message crossing
//! workers costs each side 4 µs plus 0.25 ns per byte. They were fitted to profiles of
//! the five canonical models on this project's 2-core machine (`benches/calibrate.py`,
//! which prints the model's and the measured µs per instance by kind of op); a profile of
//! the model itself replaces the counts and op times with measured ones, and tells how
//! many instances each step served and how many were in flight: a worker then starts
//! instances no faster than an instance's time in its steps (plus 35 µs of wake-up for
//! each step it waits on across a cut) over the instances in flight (`cost.rs`). The fused
//! groups of the graph are placed as units (`topology.rs`), as the executor runs them;
//! its routing chains cost a member's messages only where the plan cuts the chain.
//!
//! Workers split over processes or hosts (`Assumptions::processes`, amprun's
//! `--processes`) pay, for a cut between processes, 1.5 µs per message each side (the
//! in-process 1 µs plus the bridge's share of the ~2 million messages/s measured between
//! two processes on loopback) instead of 1, and the link's latency (default 50 µs one
//! way: kernel TCP over 10 Gb/s Ethernet, 25-50 µs round trip, plus the bridge threads)
//! over the instances in flight (amprun's `--max-active-keys`, by default its update size) and its
//! bandwidth (default 10,000 Mb/s, each direction) bound the throughput; `ampc compile`
//! and `amprun` take `--link-latency-us` and `--link-bandwidth-mbps`.

mod cost;
mod flow;
mod layout;
mod partition;
mod plan;
mod profile;
mod replicas;
mod topology;

pub use cost::{estimate, Assumptions, Costs, EdgeCost, NodeCost};
pub use layout::{evaluate_layout, plan_layout, LayoutOption};
pub use plan::{evaluate, plan, CostSummary, Plan, PlannedNode, Replica, MAX_REPLICAS, MAX_WORKERS};
pub use profile::{Event, Profile, ProfileCounter, ProfileNode, Work, PROFILE_VERSION};

use amp_ir::verify::Verified;
use std::fmt;

/// Why no plan (or no cost model) came out, or why a stored plan or profile was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum PlanError {
    /// A worker count outside 1..=1024.
    Workers { workers: usize },
    /// More processes than workers (each process runs at least one).
    Processes { processes: usize, workers: usize },
    /// An assumption that is not a finite number in its range.
    Assumption { name: &'static str, value: f64 },
    /// The costs were not estimated on this graph.
    Costs,
    /// A plan that is not the JSON of a plan.
    Json { message: String },
    /// A plan naming a node the graph lacks.
    UnknownNode { node: u32 },
    /// A plan placing a node twice.
    DuplicateNode { node: u32 },
    /// A plan placing a node on a worker it does not have.
    WorkerOutOfRange { node: u32, worker: usize, workers: usize },
    /// A plan (or placement) whose length is not the graph's node count.
    Length { placed: usize, nodes: usize },
    /// A per-worker list whose length is not the worker count.
    FieldLength { field: &'static str, len: usize, workers: usize },
    /// A profile that cannot be read or was not measured on this graph.
    Profile { message: String },
    /// A replica proposal the graph or the placement does not allow.
    Replica { node: u32, message: String },
    /// A cycle that sends back into itself at least as many messages as go around it
    /// (its way out leads back in): an instance's messages there would never end.
    Unbounded { node: u32 },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Workers { workers } => write!(f, "{workers} workers: a plan has 1 to {MAX_WORKERS}"),
            PlanError::Processes { processes, workers } => {
                write!(f, "{processes} processes but {workers} workers: each process needs a worker")
            }
            PlanError::Assumption { name, value } => {
                write!(f, "the cost assumption `{name}` = {value} is out of range")
            }
            PlanError::Costs => f.write_str("the costs were estimated on another graph"),
            PlanError::Json { message } => write!(f, "the plan is malformed: {message}"),
            PlanError::UnknownNode { node } => write!(f, "the plan places node %{node}, which the graph does not have"),
            PlanError::DuplicateNode { node } => write!(f, "the plan places node %{node} twice"),
            PlanError::WorkerOutOfRange { node, worker, workers } => {
                write!(
                    f,
                    "the plan puts node %{node} on worker {worker}, but it has only {workers} workers (0..{workers})"
                )
            }
            PlanError::Length { placed, nodes } => {
                write!(f, "the plan places {placed} nodes, but the graph has {nodes}")
            }
            PlanError::FieldLength { field, len, workers } => {
                write!(f, "the plan's `{field}` has {len} entries for {workers} workers")
            }
            PlanError::Profile { message } => write!(f, "the profile does not fit: {message}"),
            PlanError::Replica { node, message } => write!(f, "the plan's replicas of node %{node}: {message}"),
            PlanError::Unbounded { node } => write!(
                f,
                "the cycle through node %{node} never lets its messages go: every turn sends at least as many \
                 back in as came around, so an instance's messages would never end"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// Costs, then the plan of one copy of the graph over `workers` workers (stage placement
/// alone).
pub fn plan_graph(
    graph: &Verified,
    workers: usize,
    assumptions: &Assumptions,
    profile: Option<&Profile>,
) -> Result<Plan, PlanError> {
    let costs = estimate(graph, assumptions, profile)?;
    plan(graph, &costs, workers)
}

/// Costs, then the best layout of `workers` workers: copies of the graph, each placed by
/// the plan for its share of the workers (`layout.rs`). What `ampc compile --workers N`
/// and `amprun --workers N` run.
pub fn plan_workers(
    graph: &Verified,
    workers: usize,
    assumptions: &Assumptions,
    profile: Option<&Profile>,
) -> Result<Plan, PlanError> {
    let costs = estimate(graph, assumptions, profile)?;
    plan_layout(graph, &costs, workers, None)
}

/// [`plan_workers`] with the number of copies given (`amprun --copies K`): the plan of
/// `workers / copies` workers for each copy, and the layout's prediction.
pub fn plan_copies(
    graph: &Verified,
    workers: usize,
    copies: usize,
    assumptions: &Assumptions,
    profile: Option<&Profile>,
) -> Result<Plan, PlanError> {
    let costs = estimate(graph, assumptions, profile)?;
    plan_layout(graph, &costs, workers, Some(copies))
}
