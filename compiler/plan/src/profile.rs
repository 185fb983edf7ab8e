//! Profiles: per-node message counts and times measured by `amprun train --profile`, which
//! refine the cost model (`ampc compile --profile`).
//!
//! The file is one JSON object:
//!
//! ```json
//! {"version": 1, "model": "ListReduce", "instances": 2000, "workers": 1, "in_flight": 16,
//!  "wall_s": 1.1,
//!  "nodes": [{"id": 12, "op": "linear", "name": "linear cell",
//!             "forward_per_instance": 2.0, "backward_per_instance": 2.0,
//!             "forward_us": 5.7, "backward_us": 8.6,
//!             "forward_messages_per_instance": 6.0, "backward_messages_per_instance": 6.0,
//!             "forward_instances_per_instance": 0.5, "backward_instances_per_instance": 0.5,
//!             "updates_per_instance": 0.06, "update_us": 8.5,
//!             "forward_fixed_us": 1.2, "backward_fixed_us": 0.9}, ...]}
//! ```
//!
//! `forward_fixed_us` and `backward_fixed_us` are the part of a step that does not grow with
//! its rows: the intercept of the least-squares line through the steps' times against their
//! rows, absent when the steps hardly differed in size. Copies of the graph pay it again at
//! each step they add (`layout.rs`).
//!
//! Counts and times are the trace's: one event per piece of work a worker timed (the
//! messages a node takes in one step, run at once or one by one, are one event: with
//! `--max-batch 1`, every event is one message), the op's own work in whole
//! microseconds (so the means of sub-microsecond ops read low), without the routing and
//! queueing around it. The cost model uses `events × mean µs` as the node's op time and
//! adds its fixed per-message cost per event; a cut edge costs a crossing per message it
//! carries and a wake-up per step in which the receiver takes them (`Assumptions::
//! cross_us`, `hop_us`). Both counts matter: a node that batches (a fused kernel) takes
//! many messages per event, so a hop per event would make cutting it look nearly free,
//! and a full hop per message would make every cut into it look dearer than it is.

use crate::PlanError;
use amp_ir::Graph;
use petgraph::stable_graph::NodeIndex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The profile format's version.
pub const PROFILE_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub version: u32,
    /// The model's name (the graph's).
    pub model: String,
    /// Training instances the counts are over.
    pub instances: u64,
    /// Workers of the profiled run.
    pub workers: usize,
    /// Instances the profiled run kept in flight (`--max-active-keys`); 0 when unknown
    /// (profiles written before it was recorded).
    #[serde(default)]
    pub in_flight: u64,
    /// Seconds the profiled epochs took.
    #[serde(default)]
    pub wall_s: f64,
    /// One entry per node that exists in the graph.
    pub nodes: Vec<ProfileNode>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileNode {
    pub id: u32,
    /// The op's keyword; must match the graph's node.
    pub op: String,
    #[serde(default)]
    pub name: String,
    /// Forward and backward events per instance (messages, or batches of them).
    pub forward_per_instance: f64,
    pub backward_per_instance: f64,
    /// Mean µs of one forward and one backward event.
    pub forward_us: f64,
    pub backward_us: f64,
    /// Forward and backward messages per instance (the events' messages summed): what
    /// crosses between workers when the node's input edge is cut (a crossing per message,
    /// a wake-up per event). 0 in profiles written before they were counted (the events
    /// stand in).
    #[serde(default)]
    pub forward_messages_per_instance: f64,
    #[serde(default)]
    pub backward_messages_per_instance: f64,
    /// Forward and backward events' distinct instances, summed over the events, per
    /// instance: over the events per instance, how many instances an event serves at once
    /// (whether they move through the node together). 0 in profiles written before they
    /// were counted.
    #[serde(default)]
    pub forward_instances_per_instance: f64,
    #[serde(default)]
    pub backward_instances_per_instance: f64,
    /// Optimizer updates of the node's parameter group per instance, and µs per update.
    #[serde(default)]
    pub updates_per_instance: f64,
    #[serde(default)]
    pub update_us: f64,
    /// µs of a forward and of a backward step that do not grow with the rows it takes:
    /// where the least-squares line through the steps' times against their rows meets
    /// zero rows (between 0 and the mean step). Absent where the steps hardly differed in
    /// rows (no line to fit) and in older profiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_fixed_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_fixed_us: Option<f64>,
}

/// What work a trace event timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    Forward,
    Backward,
    Update,
}

/// Sums over the events of one kind of work at one node.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    events: u64,
    ns: u64,
    messages: u64,
    instances: u64,
    /// Σ rows, Σ rows² and Σ rows × µs, for the line of a step's time against its rows.
    rows: f64,
    rows_sq: f64,
    rows_us: f64,
}

impl Tally {
    /// Mean µs of an event.
    fn mean_us(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.ns as f64 / 1000.0 / self.events as f64
        }
    }

    /// The intercept of the least-squares line of an event's µs against its rows, clamped
    /// to `[0, mean]`; `None` when the events' rows hardly vary.
    fn fixed_us(&self) -> Option<f64> {
        let n = self.events as f64;
        let (x, y) = (self.rows, self.ns as f64 / 1000.0);
        // n² times the rows' variance: with less than a quarter of a row's, no slope.
        let spread = n * self.rows_sq - x * x;
        if self.events < 8 || spread.is_nan() || spread <= n * n * 0.25 {
            return None;
        }
        let slope = (n * self.rows_us - x * y) / spread;
        let fixed = ((y - slope * x) / n).clamp(0.0, self.mean_us());
        fixed.is_finite().then_some(fixed)
    }
}

/// One traced event of a [`ProfileCounter`]: `messages` of `instances` distinct
/// instances, `rows` rows in all, handled in `dur_ns` nanoseconds (an update handles
/// none).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub node: u32,
    pub work: Work,
    pub dur_ns: u64,
    pub messages: u64,
    pub instances: u64,
    pub rows: u64,
}

/// Accumulates trace events into a [`Profile`].
#[derive(Clone, Debug, Default)]
pub struct ProfileCounter {
    /// Per node: forward, backward and update work.
    per_node: BTreeMap<u32, [Tally; 3]>,
    instances: u64,
    wall_s: f64,
}

impl ProfileCounter {
    pub fn add(&mut self, e: Event) {
        let tally = &mut self.per_node.entry(e.node).or_default()[e.work as usize];
        tally.events += 1;
        tally.ns = tally.ns.saturating_add(e.dur_ns);
        tally.messages = tally.messages.saturating_add(e.messages);
        tally.instances = tally.instances.saturating_add(e.instances);
        let rows = e.rows as f64;
        tally.rows += rows;
        tally.rows_sq += rows * rows;
        tally.rows_us += rows * e.dur_ns as f64 / 1000.0;
    }

    /// `instances` more instances trained in `wall_s` seconds.
    pub fn add_instances(&mut self, instances: u64, wall_s: f64) {
        self.instances += instances;
        self.wall_s += wall_s;
    }

    /// The profile of `graph` (every node, zeros where nothing ran) over the instances so
    /// far, measured on `workers` workers with `in_flight` instances in flight.
    pub fn finish(&self, graph: &Graph, workers: usize, in_flight: u64) -> Profile {
        let per = |x: u64| if self.instances == 0 { 0.0 } else { x as f64 / self.instances as f64 };
        let nodes = graph
            .nodes
            .node_indices()
            .filter_map(|i| graph.nodes.node_weight(i).map(|n| (i.index() as u32, n)))
            .map(|(id, node)| {
                let [f, b, u] = self.per_node.get(&id).copied().unwrap_or_default();
                ProfileNode {
                    id,
                    op: node.op.keyword().to_string(),
                    name: if node.label.is_empty() {
                        node.op.keyword().to_string()
                    } else {
                        format!("{} {}", node.op.keyword(), node.label)
                    },
                    forward_per_instance: per(f.events),
                    backward_per_instance: per(b.events),
                    forward_us: f.mean_us(),
                    backward_us: b.mean_us(),
                    forward_messages_per_instance: per(f.messages),
                    backward_messages_per_instance: per(b.messages),
                    forward_instances_per_instance: per(f.instances),
                    backward_instances_per_instance: per(b.instances),
                    updates_per_instance: per(u.events),
                    update_us: u.mean_us(),
                    forward_fixed_us: f.fixed_us(),
                    backward_fixed_us: b.fixed_us(),
                }
            })
            .collect();
        Profile {
            version: PROFILE_VERSION,
            model: graph.name.clone(),
            instances: self.instances,
            workers,
            in_flight,
            wall_s: self.wall_s,
            nodes,
        }
    }
}

impl Profile {
    /// Reads a profile file's text.
    pub fn from_json(text: &str) -> Result<Profile, PlanError> {
        let profile: Profile = serde_json::from_str(text).map_err(|e| PlanError::Profile { message: e.to_string() })?;
        if profile.version != PROFILE_VERSION {
            return Err(PlanError::Profile {
                message: format!("version {} (this planner reads version {PROFILE_VERSION})", profile.version),
            });
        }
        Ok(profile)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The entries by node id, after checking that the profile was taken on `graph`: the
    /// same model, every id a node of the graph with the same op, at most one entry per
    /// node, every number finite and non-negative.
    pub(crate) fn by_node(&self, graph: &Graph) -> Result<BTreeMap<u32, &ProfileNode>, PlanError> {
        let mismatch = |message: String| PlanError::Profile { message };
        if !self.model.is_empty() && !graph.name.is_empty() && self.model != graph.name {
            return Err(mismatch(format!("it was measured on model `{}`, not `{}`", self.model, graph.name)));
        }
        let mut map = BTreeMap::new();
        for entry in &self.nodes {
            let node = graph.nodes.node_weight(NodeIndex::new(entry.id as usize));
            let Some(node) = node else {
                return Err(mismatch(format!("node %{} is not in the graph", entry.id)));
            };
            if node.op.keyword() != entry.op {
                return Err(mismatch(format!(
                    "node %{} is a `{}` in the graph but a `{}` in the profile (another graph?)",
                    entry.id,
                    node.op.keyword(),
                    entry.op
                )));
            }
            let numbers = [
                entry.forward_per_instance,
                entry.backward_per_instance,
                entry.forward_us,
                entry.backward_us,
                entry.forward_messages_per_instance,
                entry.backward_messages_per_instance,
                entry.forward_instances_per_instance,
                entry.backward_instances_per_instance,
                entry.updates_per_instance,
                entry.update_us,
                entry.forward_fixed_us.unwrap_or(0.0),
                entry.backward_fixed_us.unwrap_or(0.0),
            ];
            if numbers.iter().any(|x| !x.is_finite() || *x < 0.0 || *x > 1e12) {
                return Err(mismatch(format!("node %{} has a negative or non-finite number", entry.id)));
            }
            if map.insert(entry.id, entry).is_some() {
                return Err(mismatch(format!("node %{} appears twice", entry.id)));
            }
        }
        Ok(map)
    }
}
