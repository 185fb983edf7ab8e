//! The cost model: how long each node keeps its worker busy per training instance, and
//! what each edge costs when its ends sit on different workers.
//!
//! A node's load (µs per instance) is
//!
//! ```text
//! forward messages × message_us + fires × forward work
//!   + backward messages × message_us + fires × backward work
//!   + parameter elements / update_elements_per_us / update_every        (Ppts)
//! ```
//!
//! with messages per instance from `flow.rs` and the work of one computation from the
//! payload shapes: `linear` 2·in·out FLOPs per row forward and twice that backward (dx
//! and dW; dW alone when no parameter is behind its input, whose gradient the executor
//! then skips: `Graph::parameter_dependent`), at `flops_per_us`; every other op touches
//! elements at `elements_per_us`: `embedding` d, elementwise ops n per op
//! (transcendental ones 4n, softmax 6n; 2n backward), `concat`/`split` n, collection ops
//! rows·d; control ops (`cond`, `switch`, `phi`, `isu`, `flatmap`...) cost nothing but
//! the fixed per-message cost. An edge cut between workers costs each of the two workers
//! `cross_us + bytes / bytes_per_us` per message crossing it, forward and backward, and
//! `hop_us` per step in which the receiving node takes what crossed (a wake-up of the
//! other worker): one per message in the model, which does not predict how messages
//! queue up; with a profile, the receiver's measured steps per message (a Tree-LSTM's
//! leaf gate kernel took its ~19 forward messages per tree in a third of a step, batched
//! with other trees' leaves).
//!
//! Workers may run in several processes, on several hosts (`Assumptions::processes`;
//! worker `w` in process `process_of(w)`, the executor's contiguous blocks). An edge cut
//! between workers of different processes costs each worker `link_message_us + bytes /
//! bytes_per_us` per message each way instead (the message encoded, with its
//! `amp_ir::placement::MESSAGE_HEADER_BYTES` of wire header, and passed through the bridge thread), the same `hop_us` per step; each
//! of the two processes' links is busy `bytes / link_bytes_per_us` per message (the
//! forward message one way, its gradient the other, on a full-duplex link): the planner
//! treats each link as one more resource whose time bounds the throughput
//! (`partition.rs`). The link's latency adds to the instance's time, not to a worker's:
//! over the instances in flight it bounds the throughput like the wake-ups below (without
//! a profile, `2 × messages × link_latency_us / in_flight` per cut edge).
//!
//! The nodes of a fused group (and the splits only it reads: a unit, see `topology.rs`)
//! run as one node that calls one kernel: their messages to one another cost nothing, and
//! the unit's representative pays `message_us` for every message that enters or leaves the
//! unit (`routing_us`); each member keeps its own work, at `fused_elements_per_us`.
//!
//! Under plain SGD without weight decay (`Assumptions::plain_sgd`, as the executor
//! updates then) an update touches only what instances used since the last one: an
//! embedding table the rows looked up (at most the table), a linear layer only when some
//! instance reached it (an expert of a mixture: with probability `1 - (1 - r)^update_every`
//! for `r < 1` messages per instance), and reads and writes each element once, four times
//! the rate of an Adam update.
//!
//! A routing node that joins its producer's chain (`topology.rs`) handles its messages in
//! its producer's worker step when the two share a worker: it pays no `message_us` of its
//! own, and the edge from its producer costs, when cut, its messages' `message_us` besides
//! the crossing (half to each side, as every cut cost is split).
//!
//! A profile (`amprun train --profile`) replaces the counted messages and the modelled
//! op time with measured ones; the fixed per-message cost stays (the trace times the op,
//! not the routing around it).
//!
//! A profile also tells what part of a node's step does not shrink with its rows (fit
//! through steps of different sizes; where all had one size, what the step took beyond the
//! model's work for its messages): what copies of the graph pay again at each step they
//! add (`NodeCost::forward_fixed_us`, `layout.rs`).
//!
//! A profile also tells how instances move: how many of them each step of a node serves
//! at once, and how many were in flight. An instance spends, per instance, the steps it
//! takes part in times their length at each node (`NodeCost::latency_us`), and waits a
//! wake-up of the receiving worker (`Assumptions::wake_us`) at each step in which what
//! crossed a cut edge reaches it (`EdgeCost::waits`); with `in_flight` instances in
//! flight, a worker can start an instance no faster than every `latency / in_flight`
//! (Little's law), whatever the split. An MLP whose 16 instances go through every node
//! together has a latency of 16 times its work per instance: split over two workers, one
//! waits while the other works, and the wake-ups come on top.

use crate::flow::{self, Flow};
use crate::profile::Profile;
use crate::topology::Topology;
use crate::PlanError;
use amp_ir::placement::{group_owners, MAX_PLANNED_PROCESSES, MESSAGE_HEADER_BYTES};
use amp_ir::{Graph, Op, PayloadTy};
use petgraph::stable_graph::NodeIndex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the cost model assumes where the graph does not tell. The defaults were fitted
/// to profiles of the five canonical models on this project's 2-core development machine
/// (`benches/calibrate.py`: one worker, the JIT and dynamic batching on, 16 instances in
/// flight, plain SGD every 8 instances; see the crate header).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Assumptions {
    /// Iterations of a loop whose bound comes from the data (`while`, `for i in 0..n`).
    pub trip_count: f64,
    /// Elements of a collection whose length comes from the data (`len(x.tokens)`, the
    /// rows of a batch, `for tok in x.tokens`).
    pub elements: f64,
    /// Nodes of a tree a traversal walks (`len(s.tree)`).
    pub tree_nodes: f64,
    /// Instances per parameter update (amprun's `--min-update-frequency`).
    pub update_every: f64,
    /// The optimizer is plain SGD without weight decay: updates skip the parameter groups
    /// and embedding rows no instance used (amprun sets it from `--optimizer`).
    pub plain_sgd: bool,
    /// Synchronous training (amprun's default; `--async` is not): no instance starts past
    /// an update boundary before the update, so copies of the graph wait for each other
    /// there (`layout.rs`).
    pub synchronous: bool,
    /// Fixed cost of handling one message at a node (queues, keys, caches), in µs.
    pub message_us: f64,
    /// Sustained FLOPs per µs of the dense products (`linear`).
    pub flops_per_us: f64,
    /// Elements per µs of the other ops (elementwise, copies, collections).
    pub elements_per_us: f64,
    /// µs per row of an op that handles each row of a batch on its own, besides its
    /// elements: `gather_rows`, `scatter_sum`, `partition_rows`, `merge_rows`, `mask_rows`
    /// and `embedding_rows` evaluate each row's index, arm or table row from the message's
    /// state, both directions.
    pub row_us: f64,
    /// Elements per µs of an op inside a fused kernel (the JIT's f32x4 code, its
    /// transcendental functions as polynomials).
    pub fused_elements_per_us: f64,
    /// Parameter elements per µs of an optimizer update (memory-bound: Adam reads and
    /// writes four tensors).
    pub update_elements_per_us: f64,
    /// Extra cost, for each of the two workers, of a step in which a node takes messages
    /// that crossed between workers (waking the receiving worker), in µs.
    pub hop_us: f64,
    /// Extra cost, for each of the two workers, of each message crossing between workers
    /// (the channel, the payload's cache lines on the other core), in µs.
    pub cross_us: f64,
    /// Bytes per µs moved between workers.
    pub bytes_per_us: f64,
    /// How long an instance waits, in µs, for an idle worker to wake up and take the
    /// messages that crossed to it (the receiving thread blocked on its channel). With a
    /// profile only (see the crate header). The default is what `cargo bench -p
    /// amp-benches --bench wake` measures after 50 µs idle on the 2-core development
    /// machine (docs/PERFORMANCE.md, "What a wake-up costs").
    pub wake_us: f64,
    /// Each worker's speed relative to the others (amprun's `--worker-speed W=S`: 0.33 is
    /// a worker three times slower): a worker's time is its nodes' work and cuts over its
    /// speed, so the planner moves load away from a slow one. Empty, or a worker past the
    /// list's end: 1.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worker_speed: Vec<f64>,
    /// Processes (hosts) the workers are split over (amprun's `--processes`): process `p`
    /// runs a contiguous block of the globally numbered workers
    /// (`amp_ir::placement::process_of`, which the executor follows). An edge cut between workers of one process
    /// costs what the fields above say; one cut between processes crosses the link below.
    pub processes: usize,
    /// Extra cost, for each of the two workers, of each message crossing between
    /// processes instead of `cross_us`: encoding or decoding it and handing it to or
    /// taking it from the process's bridge thread, in µs.
    pub link_message_us: f64,
    /// One-way latency of the link between two processes, in µs: what a message crossing
    /// it adds to its instance's time (not to a worker's), which the instances in flight
    /// hide (`in_flight`, or the profile's).
    pub link_latency_us: f64,
    /// Bandwidth of each process's link, in megabits per second, each direction (full
    /// duplex): the bytes a process sends (or receives) per instance over it bound the
    /// throughput like a worker's time.
    pub link_bandwidth_mbps: f64,
    /// Instances in flight (amprun's `--max-active-keys`), which hide the link's latency
    /// when no profile tells how many were in flight.
    pub in_flight: f64,
}

impl Default for Assumptions {
    fn default() -> Assumptions {
        Assumptions {
            trip_count: 8.0,
            elements: 8.0,
            tree_nodes: 31.0,
            update_every: 1.0,
            plain_sgd: false,
            synchronous: true,
            message_us: 0.4,
            flops_per_us: 50_000.0,
            elements_per_us: 2_000.0,
            // GGSNN (hidden 32) on two quiet cores: 0.12-0.17 µs per row of these ops, of
            // which its 32 elements are 0.016 (docs/PERFORMANCE.md, "Placement and
            // workers").
            row_us: 0.12,
            fused_elements_per_us: 1_000.0,
            update_elements_per_us: 600.0,
            hop_us: 3.0,
            cross_us: 1.0,
            bytes_per_us: 4_000.0,
            wake_us: 35.0,
            worker_speed: Vec::new(),
            processes: 1,
            // The in-process crossing (1 µs) plus the bridge's share: timely's TCP
            // allocator moved about 2 million messages/s between two processes on
            // loopback (docs/distributed.md, "Why timely_communication").
            link_message_us: 1.5,
            // Kernel TCP between two hosts on 10 Gb/s Ethernet takes some 25-50 µs
            // round trip; one way, plus the bridge and timely's threads on each side.
            link_latency_us: 50.0,
            // 10 Gb/s Ethernet.
            link_bandwidth_mbps: 10_000.0,
            // One instance in flight with an update after each (amprun's `--deterministic`;
            // its defaults are set by the caller).
            in_flight: 1.0,
        }
    }
}

impl Assumptions {
    /// The assumptions for one copy of the graph among several: a copy runs in one
    /// process, so its stages cross no link.
    pub fn within_a_copy(&self) -> Assumptions {
        Assumptions { processes: 1, ..self.clone() }
    }

    /// Worker `w`'s speed (1 when not given).
    pub fn speed(&self, w: usize) -> f64 {
        self.worker_speed.get(w).copied().unwrap_or(1.0)
    }

    /// Bytes per µs of the link between processes (`link_bandwidth_mbps` / 8).
    pub fn link_bytes_per_us(&self) -> f64 {
        self.link_bandwidth_mbps / 8.0
    }

    /// Every value must be finite; counts non-negative, rates, speeds, `update_every` and
    /// `in_flight` positive; 1 to 256 processes.
    pub fn check(&self) -> Result<(), PlanError> {
        let fields = [
            ("trip_count", self.trip_count, false),
            ("elements", self.elements, false),
            ("tree_nodes", self.tree_nodes, false),
            ("update_every", self.update_every, true),
            ("message_us", self.message_us, false),
            ("flops_per_us", self.flops_per_us, true),
            ("elements_per_us", self.elements_per_us, true),
            ("row_us", self.row_us, false),
            ("fused_elements_per_us", self.fused_elements_per_us, true),
            ("update_elements_per_us", self.update_elements_per_us, true),
            ("hop_us", self.hop_us, false),
            ("cross_us", self.cross_us, false),
            ("bytes_per_us", self.bytes_per_us, true),
            ("wake_us", self.wake_us, false),
            ("link_message_us", self.link_message_us, false),
            ("link_latency_us", self.link_latency_us, false),
            ("link_bandwidth_mbps", self.link_bandwidth_mbps, true),
            ("in_flight", self.in_flight, true),
        ];
        let speeds = self.worker_speed.iter().map(|&s| ("worker_speed", s, true));
        for (name, value, positive) in fields.into_iter().chain(speeds) {
            let fine = value.is_finite() && value <= 1e12 && if positive { value > 0.0 } else { value >= 0.0 };
            if !fine {
                return Err(PlanError::Assumption { name, value });
            }
        }
        if self.worker_speed.len() > crate::MAX_WORKERS {
            return Err(PlanError::Workers { workers: self.worker_speed.len() });
        }
        if self.processes == 0 || self.processes > MAX_PLANNED_PROCESSES {
            return Err(PlanError::Assumption { name: "processes", value: self.processes as f64 });
        }
        Ok(())
    }
}

/// One node's predicted work per instance.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCost {
    pub id: u32,
    /// `op label` (`linear cell`), for tables.
    pub name: String,
    /// A parameterized payload transform (`linear`, `embedding`).
    pub ppt: bool,
    /// The representative of the node's unit: its own id, or a fused group's first node
    /// (the executor runs the group as one node).
    pub unit: u32,
    /// Runs in its producer's step when the two share a worker (a routing chain's member,
    /// a linear's epilogue: `topology.rs`): its messages are then its producer's steps.
    pub chained: bool,
    /// Forward messages handled per instance.
    pub forward_messages: f64,
    /// Backward messages handled per instance (training).
    pub backward_messages: f64,
    /// Forward messages per instance that reach the node, each a crossing over a cut input
    /// edge: the model's `forward_messages`, or a profile's messages (which a profile's
    /// `forward_messages`, its events, can be far fewer than: batches and steps).
    pub arrivals: f64,
    /// Backward messages per instance that reach the node (over its cut output edges):
    /// the model's `backward_messages`, or a profile's messages.
    pub backward_arrivals: f64,
    /// Work of one forward and one backward computation: FLOPs for `linear`, elements
    /// touched for the others.
    pub forward_work: f64,
    pub backward_work: f64,
    /// µs per forward and per backward message: the work, plus `message_us` unless the
    /// node belongs to a fused unit (whose messages its representative pays, `routing_us`).
    pub forward_us: f64,
    pub backward_us: f64,
    /// A fused unit's representative: `message_us` for each message per instance that
    /// enters or leaves the unit, both directions; 0 for every other node.
    pub routing_us: f64,
    /// Optimizer updates, µs per instance (on the first node of a parameter group).
    pub update_us: f64,
    /// The parameter elements of the group it updates (on the first node of a parameter
    /// group; 0 on the others): what copies of the graph gather and share at each update
    /// (`layout.rs`).
    pub update_elements: f64,
    /// Total: µs of its worker's time per instance.
    pub load_us: f64,
    /// Forward and backward steps of the node an instance takes part in, per instance
    /// (a step serving several instances counts for each), from a profile; 0 without one.
    pub forward_joined: f64,
    pub backward_joined: f64,
    /// µs an instance spends in the node's steps (each as long as all the messages it
    /// serves together take), per instance, from a profile; 0 without one.
    pub latency_us: f64,
    /// µs of each forward and backward step that do not shrink with the rows it serves:
    /// the profile's fit through steps of different sizes, or where they all had one size
    /// the measured step less the model's work for its messages (at least 0); 0 without a
    /// profile. Copies of the graph split the instances in flight, so each
    /// step serves fewer rows and there are more steps (`layout.rs`): an MLP's Linear step
    /// took about as long on 4 rows as on 8.
    pub forward_fixed_us: f64,
    pub backward_fixed_us: f64,
    /// Whether messages and times come from a profile.
    pub measured: bool,
    /// The parameter group it reads and trains (`linear`, `embedding`, `affine`): the
    /// executor keeps a group's nodes in its owner's process (`partition.rs`).
    pub group: Option<String>,
}

/// One edge's traffic and what cutting it costs.
#[derive(Clone, Debug, PartialEq)]
pub struct EdgeCost {
    pub from: u32,
    pub to: u32,
    /// Forward messages per instance (as many go back in training).
    pub messages: f64,
    /// Bytes per message (payload and state).
    pub bytes: f64,
    /// µs per instance that each of the two workers pays when the edge is cut between
    /// workers of one process.
    pub cut_us: f64,
    /// The same when the edge is cut between workers of different processes.
    pub remote_cut_us: f64,
    /// µs per instance of each of the two processes' links when the edge is cut between
    /// them (its bytes each way over the bandwidth).
    pub link_us: f64,
    /// Steps per instance, both directions, in which an instance waits for what crossed
    /// the edge, when it is cut, to be taken by the other worker (a wake-up each); from a
    /// profile, 0 without one.
    pub waits: f64,
}

/// The cost model evaluated on one graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Costs {
    /// By node index; `None` for holes.
    pub nodes: Vec<Option<NodeCost>>,
    pub edges: Vec<EdgeCost>,
    pub assumptions: Assumptions,
    /// Whether a profile refined the model.
    pub profiled: bool,
    /// Instances in flight in the profiled run; 0 without a profile or when it does not
    /// say (no latency bound then).
    pub in_flight: f64,
}

impl Costs {
    /// µs of work per instance, all nodes together (no communication).
    pub fn total_us(&self) -> f64 {
        self.nodes.iter().flatten().map(|n| n.load_us).sum()
    }

    pub fn node(&self, id: usize) -> Option<&NodeCost> {
        self.nodes.get(id).and_then(Option::as_ref)
    }
}

/// Evaluates the cost model on `graph`, refined by `profile` when given (which must have
/// been measured on the same graph).
pub fn estimate(graph: &Graph, assumptions: &Assumptions, profile: Option<&Profile>) -> Result<Costs, PlanError> {
    assumptions.check()?;
    let measured = match profile {
        Some(p) => Some(p.by_node(graph)?),
        None => None,
    };
    let topo = Topology::new(graph);
    let flow = flow::solve(graph, &topo, assumptions)?;
    let dependent = graph.parameter_dependent();
    let units = Units::new(&topo, &flow);
    let a = assumptions;
    let mut nodes: Vec<Option<NodeCost>> = vec![None; topo.bound];
    let update_owner = group_owners(graph);
    for i in topo.nodes() {
        let Some(node) = graph.nodes.node_weight(NodeIndex::new(i)) else { continue };
        let out_rows = flow.rows[i].first().copied().unwrap_or(1.0);
        let input_grad = topo.producers[i].iter().flatten().any(|&k| dependent[topo.links[k].from]);
        let (forward_work, backward_work) =
            work(graph, &node.op, (&node.inputs, flow.in_rows[i]), (&node.outputs, out_rows), input_grad);
        let fused = units.fused(i);
        let rate = match node.op {
            Op::Linear { .. } => a.flops_per_us,
            _ if fused => a.fused_elements_per_us,
            _ => a.elements_per_us,
        };
        let fires = flow.fires[i];
        // Inside a fused unit, a message is a value the kernel passes on in registers; a
        // chain member's messages are its producer's step (or, cut, the edge's cost).
        let message_us = if fused || topo.chained[i] { 0.0 } else { a.message_us };
        let rows_each = indexed_rows(&node.op, &node.inputs, flow.in_rows[i], out_rows) * a.row_us;
        let compute = |messages: f64, work: f64| {
            if messages > 0.0 {
                fires * (work / rate + rows_each) / messages
            } else {
                0.0
            }
        };
        let per_message = |messages: f64, work: f64| message_us + compute(messages, work);
        let mut cost = NodeCost {
            id: i as u32,
            name: if node.label.is_empty() {
                node.op.keyword().to_string()
            } else {
                format!("{} {}", node.op.keyword(), node.label)
            },
            ppt: node.op.is_ppt(),
            unit: topo.unit_of[i] as u32,
            chained: topo.chained[i],
            forward_messages: flow.forward[i],
            backward_messages: flow.backward[i],
            arrivals: flow.forward[i],
            backward_arrivals: flow.backward[i],
            forward_work,
            backward_work,
            forward_us: per_message(flow.forward[i], forward_work),
            backward_us: per_message(flow.backward[i], backward_work),
            routing_us: units.crossing.get(&i).map_or(0.0, |&m| a.message_us * m),
            update_us: 0.0,
            update_elements: 0.0,
            load_us: 0.0,
            forward_joined: 0.0,
            backward_joined: 0.0,
            latency_us: 0.0,
            forward_fixed_us: 0.0,
            backward_fixed_us: 0.0,
            measured: false,
            group: node.op.param().map(str::to_string),
        };
        if let Some(param) = node.op.param() {
            if update_owner.get(param) == Some(&i) {
                // A batch of looked-up rows touches one table row per row.
                let lookups = if matches!(node.op, Op::EmbeddingRows { .. }) { out_rows } else { 1.0 };
                cost.update_us = update_us(graph, &node.op, param, flow.forward[i] * lookups, a);
                cost.update_elements = param_elements(graph, param);
            }
        }
        if let Some(m) = measured.as_ref().and_then(|m| m.get(&(i as u32))) {
            cost.forward_messages = m.forward_per_instance;
            cost.backward_messages = m.backward_per_instance;
            // Profiles from before messages were counted have their events alone.
            let messages = |counted: f64, events: f64| if counted > 0.0 { counted } else { events };
            cost.arrivals = messages(m.forward_messages_per_instance, m.forward_per_instance);
            cost.backward_arrivals = messages(m.backward_messages_per_instance, m.backward_per_instance);
            cost.forward_us = message_us + m.forward_us;
            cost.backward_us = message_us + m.backward_us;
            cost.update_us = m.updates_per_instance * m.update_us;
            cost.forward_joined = m.forward_instances_per_instance;
            cost.backward_joined = m.backward_instances_per_instance;
            cost.latency_us = cost.forward_joined * cost.forward_us + cost.backward_joined * cost.backward_us;
            if !cost.latency_us.is_finite() {
                cost.latency_us = 0.0;
            }
            // The profile's line through the steps; where every step took as many rows, what
            // the step took beyond the model's work for its messages (none for an op the
            // model gives no work: its time is per message).
            let fixed = |fit: Option<f64>, step_us: f64, events: f64, messages: f64, modelled: f64, work: f64| {
                let work_us = compute(modelled, work);
                let fixed = match fit {
                    Some(fixed) => fixed,
                    None if events > 0.0 && work_us > 0.0 => step_us - work_us * messages / events,
                    None => 0.0,
                };
                if fixed.is_finite() {
                    fixed.clamp(0.0, step_us)
                } else {
                    0.0
                }
            };
            let (f, b) = (m.forward_per_instance, m.backward_per_instance);
            cost.forward_fixed_us =
                fixed(m.forward_fixed_us, m.forward_us, f, cost.arrivals, flow.forward[i], forward_work);
            cost.backward_fixed_us =
                fixed(m.backward_fixed_us, m.backward_us, b, cost.backward_arrivals, flow.backward[i], backward_work);
            cost.measured = true;
        }
        cost.load_us = (cost.forward_messages * cost.forward_us + cost.backward_messages * cost.backward_us).max(0.0)
            + cost.update_us.max(0.0)
            + cost.routing_us.max(0.0);
        if !cost.load_us.is_finite() {
            cost.load_us = 0.0;
        }
        nodes[i] = Some(cost);
    }
    let edges = edge_costs(graph, &topo, &flow, &nodes, a);
    let in_flight = profile.map_or(0.0, |p| p.in_flight as f64);
    Ok(Costs { nodes, edges, assumptions: assumptions.clone(), profiled: measured.is_some(), in_flight })
}

/// The fused units of the graph and the messages that cross their borders.
struct Units<'t> {
    topo: &'t Topology,
    /// Per representative: whether its unit has several nodes.
    multi: Vec<bool>,
    /// Per representative of a unit of several nodes: forward messages per instance that
    /// enter it (once per producer port, however many members read it) or leave it (once
    /// per consumer outside), and as many backward.
    crossing: BTreeMap<usize, f64>,
}

impl<'t> Units<'t> {
    fn new(topo: &'t Topology, flow: &Flow) -> Units<'t> {
        let mut multi = vec![false; topo.bound];
        for v in topo.nodes().filter(|&v| !topo.leads(v)) {
            multi[topo.unit_of[v]] = true;
        }
        let mut entering: BTreeMap<usize, BTreeMap<(usize, usize), f64>> = BTreeMap::new();
        let mut leaving: BTreeMap<usize, f64> = BTreeMap::new();
        for l in &topo.links {
            let (from, to) = (topo.unit_of[l.from], topo.unit_of[l.to]);
            if from == to {
                continue;
            }
            let rate = flow.out[l.from].get(l.from_port).copied().unwrap_or(0.0);
            if multi[to] {
                entering.entry(to).or_default().insert((l.from, l.from_port), rate);
            }
            if multi[from] {
                *leaving.entry(from).or_default() += rate;
            }
        }
        let mut crossing: BTreeMap<usize, f64> = BTreeMap::new();
        for (unit, ports) in entering {
            *crossing.entry(unit).or_default() += 2.0 * ports.values().sum::<f64>();
        }
        for (unit, rate) in leaving {
            *crossing.entry(unit).or_default() += 2.0 * rate;
        }
        Units { topo, multi, crossing }
    }

    /// Whether `v` belongs to a unit of several nodes.
    fn fused(&self, v: usize) -> bool {
        self.multi[self.topo.unit_of[v]]
    }
}

/// How much faster than `update_elements_per_us` (an Adam update) a plain SGD update
/// goes: a quarter of the memory traffic.
pub(crate) const SGD_UPDATE_SPEEDUP: f64 = 4.0;

/// The elements of parameter group `param`: its weight and bias.
fn param_elements(graph: &Graph, param: &str) -> f64 {
    let size = |name: String| graph.param(&name).map_or(0.0, |p| p.shape.iter().map(|&d| d as f64).product::<f64>());
    size(format!("{param}.weight")) + size(format!("{param}.bias"))
}

/// µs per instance of the optimizer updates of the parameter group of `op` (its first
/// node), reached by `messages` forward messages per instance.
fn update_us(graph: &Graph, op: &Op, param: &str, messages: f64, a: &Assumptions) -> f64 {
    let weight = graph.param(&format!("{param}.weight")).map(|p| p.shape.as_slice()).unwrap_or_default();
    let elements = param_elements(graph, param);
    let touched = if !a.plain_sgd {
        elements
    } else if let Op::Embedding { .. } | Op::EmbeddingRows { .. } = op {
        // Rows looked up between two updates, each as wide as the table's rows.
        let width = weight.get(1).map_or(1.0, |&d| d as f64);
        (messages * a.update_every * width).min(elements)
    } else {
        let reached = 1.0 - (1.0 - messages.clamp(0.0, 1.0)).powf(a.update_every);
        reached * elements
    };
    // Plain SGD reads and writes each element once (the deferred products go straight
    // into the weight); momentum and Adam read and write their state tensors as well.
    let rate = if a.plain_sgd { SGD_UPDATE_SPEEDUP * a.update_elements_per_us } else { a.update_elements_per_us };
    touched / rate / a.update_every
}

fn edge_costs(
    graph: &Graph,
    topo: &Topology,
    flow: &Flow,
    nodes: &[Option<NodeCost>],
    a: &Assumptions,
) -> Vec<EdgeCost> {
    let state_bytes = 8.0 * graph.state.len() as f64;
    topo.links
        .iter()
        .filter(|l| l.from != l.to)
        .map(|l| {
            let modelled = flow.out[l.from].get(l.from_port).copied().unwrap_or(0.0);
            // With a profile, the edge carries its share of the target's measured
            // messages (shares as the model splits them between the target's inputs).
            let messages = match nodes.get(l.to).and_then(Option::as_ref) {
                Some(target) if target.measured => {
                    if flow.forward[l.to] > 0.0 {
                        modelled * target.arrivals / flow.forward[l.to]
                    } else {
                        target.arrivals / topo.producers[l.to].len().max(1) as f64
                    }
                }
                _ => modelled,
            };
            let ty = graph.nodes.node_weight(NodeIndex::new(l.from)).and_then(|n| n.outputs.get(l.from_port));
            let rows = flow.rows[l.from].get(l.from_port).copied().unwrap_or(1.0);
            let payload = match ty {
                Some(PayloadTy::F32(_)) => 4.0 * ty.map_or(0, PayloadTy::elements) as f64,
                Some(PayloadTy::Batch(_)) => 4.0 * rows * ty.map_or(0, PayloadTy::elements) as f64,
                _ => 0.0,
            };
            let bytes = payload + state_bytes;
            // Forward, the target takes the crossing messages; backward, the source.
            let steps = per_message(nodes, l.to, |c| (c.forward_messages, c.arrivals), 1.0)
                + per_message(nodes, l.from, |c| (c.backward_messages, c.backward_arrivals), 1.0);
            let mut cut_us = messages * (2.0 * (a.cross_us + bytes / a.bytes_per_us) + steps * a.hop_us);
            // Between processes a message is encoded, passes the bridge and is decoded:
            // the copy of its bytes stays, the channel's cost is the link's per message.
            let wire_bytes = bytes + MESSAGE_HEADER_BYTES as f64;
            let mut remote_cut_us =
                messages * (2.0 * (a.link_message_us + wire_bytes / a.bytes_per_us) + steps * a.hop_us);
            // Forward messages go one way, their gradients the other: each process sends
            // (and receives) the edge's bytes once per message, in parallel on a duplex link.
            let link_us = messages * wire_bytes / a.link_bytes_per_us();
            // A chain member cut from its producer handles its messages in steps of its own.
            if topo.chained[l.to] {
                if let Some(target) = nodes.get(l.to).and_then(Option::as_ref) {
                    let own = a.message_us * (target.forward_messages + target.backward_messages) / 2.0;
                    cut_us += own;
                    remote_cut_us += own;
                }
            }
            // The steps an instance takes part in per message it sends over the edge,
            // forward at the target, backward at the source.
            let waits = messages
                * (per_message(nodes, l.to, |c| (c.forward_joined, c.arrivals), 0.0)
                    + per_message(nodes, l.from, |c| (c.backward_joined, c.backward_arrivals), 0.0));
            EdgeCost {
                from: l.from as u32,
                to: l.to as u32,
                messages,
                bytes,
                cut_us: if cut_us.is_finite() { cut_us } else { 0.0 },
                remote_cut_us: if remote_cut_us.is_finite() { remote_cut_us } else { 0.0 },
                link_us: if link_us.is_finite() { link_us } else { 0.0 },
                waits: if waits.is_finite() { waits } else { 0.0 },
            }
        })
        .collect()
}

/// A count per message that node `i` takes in one direction, from its (count, messages)
/// per instance as `counts` picks them: measured by a profile, at most 1; `otherwise`
/// without one (or without messages). The counts: the steps it takes them in (a node
/// that batches takes many in one step; 1 in the model), and the steps an instance takes
/// part in (0 in the model, which does not know how instances move).
fn per_message(nodes: &[Option<NodeCost>], i: usize, counts: impl Fn(&NodeCost) -> (f64, f64), otherwise: f64) -> f64 {
    match nodes.get(i).and_then(Option::as_ref) {
        Some(c) if c.measured => {
            let (count, messages) = counts(c);
            if messages > 0.0 {
                (count / messages).clamp(0.0, 1.0)
            } else {
                otherwise
            }
        }
        _ => otherwise,
    }
}

/// Rows of one computation of `op` that it handles one by one (an index, arm or table
/// row evaluated per row: `Assumptions::row_us` each), 0 for an op that does not.
fn indexed_rows(op: &Op, inputs: &[PayloadTy], in_rows: f64, out_rows: f64) -> f64 {
    let batch = matches!(inputs.first(), Some(PayloadTy::Batch(_)));
    match op {
        Op::PartitionRows { .. } | Op::ScatterSum { .. } if batch => in_rows,
        Op::GatherRows { .. } | Op::MergeRows { .. } | Op::MaskRows { .. } | Op::EmbeddingRows { .. } => out_rows,
        _ => 0.0,
    }
}

/// The work of one forward and one backward computation of `op` on these payloads, each
/// side with the expected rows of its (first) batch: FLOPs for `linear`, elements touched
/// for every other op. `input_grad`: whether a parameter is behind the input (a `linear`
/// computes its input gradient only then).
pub(crate) fn work(
    graph: &Graph,
    op: &Op,
    (inputs, in_rows): (&[PayloadTy], f64),
    (outputs, out_rows): (&[PayloadTy], f64),
    input_grad: bool,
) -> (f64, f64) {
    let count = |ty: Option<&PayloadTy>, rows: f64| -> f64 {
        match ty {
            Some(t @ PayloadTy::Batch(_)) => rows * t.elements() as f64,
            Some(t) => t.elements() as f64,
            None => 0.0,
        }
    };
    let input = count(inputs.first(), in_rows);
    let output = count(outputs.first(), out_rows);
    let all_outputs: f64 = outputs.iter().map(|t| count(Some(t), out_rows)).sum();
    let rows = in_rows;
    match op {
        Op::Linear { param } => {
            let weight = graph.param(&format!("{param}.weight")).map(|p| p.shape.clone());
            let (out, inp) = match weight.as_deref() {
                Some([out, inp]) => (*out as f64, *inp as f64),
                _ => (output, input),
            };
            let rows = if matches!(inputs.first(), Some(PayloadTy::Batch(_))) { rows } else { 1.0 };
            let forward = 2.0 * inp * out * rows;
            (forward, if input_grad { 2.0 * forward } else { forward })
        }
        Op::Embedding { .. } | Op::EmbeddingRows { .. } => (output, output),
        // A product and a sum per element; backward the input's gradient and the two
        // parameters' (three products and sums).
        Op::Affine { .. } => (2.0 * output, 6.0 * output),
        Op::Unary(f) => (f.spec().flops * output, 2.0 * output),
        Op::Binary(_) => (output, 2.0 * output),
        // A hash and a multiply per element; the backward recomputes the mask.
        Op::Dropout { .. } => (4.0 * output, 4.0 * output),
        Op::Concat | Op::Split { .. } => (all_outputs, all_outputs),
        Op::Group { .. } => (output, output),
        Op::Ungroup { .. } | Op::Reduce(_) | Op::ScatterSum { .. } => (input.max(output), input.max(output)),
        Op::Gather { .. } => (output, input),
        // Copies the rows forward, adds them back (into zeros of the input's size).
        Op::GatherRows { .. } => (output, input.max(output)),
        Op::MaskRows { .. } => (output, output),
        // Every row copied once each way.
        Op::PartitionRows { .. } => (input, input),
        Op::MergeRows { .. } => (output, output),
        Op::TopK { k } => (input * f64::from(*k).max(1.0), output),
        Op::Loss(_) => (4.0 * input, 2.0 * input),
        Op::StateFromPayload { .. } => (input, 0.0),
        Op::Read { .. } | Op::Const { .. } => (output, 0.0),
        Op::Source
        | Op::Forget
        | Op::Cond { .. }
        | Op::Switch { .. }
        | Op::Phi { .. }
        | Op::Isu { .. }
        | Op::Sink { .. }
        | Op::Flatmap { .. } => (0.0, 0.0),
    }
}
