//! Expected forward messages per instance on every output port, from the graph alone.
//!
//! Every instance sends one message out of the source; each op then passes, multiplies,
//! splits or joins the rate of its inputs: a `flatmap` multiplies it by its expected
//! count, an `ungroup` by the rows of its batch, a `cond` or `switch` splits it between
//! its ports, a `phi` adds its inputs, a join (`binary`, `concat`, `group`...) fires once
//! per matched set. Cycles (loops, tree traversals) are solved by iterating to a fixed
//! point: a `cond` with one port inside its cycle and one leaving it keeps a share
//! `T / (T + 1)` inside, so the cycle runs `T` times per entry on average. The rates
//! are linear in one another, so the iteration's steps shrink geometrically by the
//! cycle's gain; once two successive ratios of steps agree, the rest of the geometric
//! series is added at once (a loop of 100,000 turns settles in a few sweeps instead of
//! millions), and a gain of 1 or more is an error: messages that never end.
//!
//! Where the data decides (a `len(...)`, a loop bound read from the instance), the
//! [`Assumptions`] give the expected value; a profile replaces all of this with measured
//! counts (see `cost.rs`).

use crate::cost::Assumptions;
use crate::topology::Topology;
use crate::PlanError;
use amp_ir::{DataStep, FieldRole, Graph, IntOp, Op, PayloadTy, StateExpr};

/// Rates beyond this are clamped (a graph file could ask for absurd counts).
const MAX_RATE: f64 = 1e15;
/// Port updates spent at most per cycle while iterating to its fixed point.
const CYCLE_BUDGET: usize = 20_000_000;

/// What flows out of every node, per instance.
pub(crate) struct Flow {
    /// Forward messages per instance on each output port: `out[node][port]`.
    pub out: Vec<Vec<f64>>,
    /// Expected rows of each output port's payload: 1 for tensors, the element count for
    /// a batch `f32[?, d]`.
    pub rows: Vec<Vec<f64>>,
    /// Times the op computes per instance (one per message for most ops, one per matched
    /// set for joins, one per context for `group`).
    pub fires: Vec<f64>,
    /// Forward messages handled per instance (every input port's, or 1 at the source).
    pub forward: Vec<f64>,
    /// Backward messages handled per instance in training: one per consumer of every
    /// forward message sent (a dropped port answers itself once).
    pub backward: Vec<f64>,
    /// Rows of the batch a node's first input carries (1 for tensors).
    pub in_rows: Vec<f64>,
}

/// Two successive ratios of steps closer than this are the cycle's gain.
const RATIO_AGREES: f64 = 1e-9;
/// Gains from here on do not shrink: the cycle's messages never end.
const UNBOUNDED_GAIN: f64 = 1.0 - 1e-12;

pub(crate) fn solve(graph: &Graph, topo: &Topology, assumptions: &Assumptions) -> Result<Flow, PlanError> {
    let n = topo.bound;
    let mut flow = Flow {
        out: vec![Vec::new(); n],
        rows: vec![Vec::new(); n],
        fires: vec![0.0; n],
        forward: vec![0.0; n],
        backward: vec![0.0; n],
        in_rows: vec![1.0; n],
    };
    for i in topo.nodes() {
        let outputs = topo.consumers[i].len();
        flow.out[i] = vec![0.0; outputs];
        flow.rows[i] = vec![1.0; outputs];
    }
    let rules = Rules::new(graph, topo, assumptions);
    for (s, component) in topo.sccs.iter().enumerate() {
        if !topo.cyclic[s] {
            for &v in component {
                rules.step(graph, topo, &mut flow, v);
            }
            continue;
        }
        let ports: usize = component.iter().map(|&v| topo.consumers[v].len().max(1)).sum();
        let sweeps = (CYCLE_BUDGET / ports.max(1)).max(1);
        let mut series = Series::default();
        for sweep in 0..sweeps {
            let mut change = 0.0f64;
            for &v in component {
                change = change.max(rules.step(graph, topo, &mut flow, v));
            }
            if change <= 1e-12 {
                break;
            }
            // A sweep carries a rate at least one node further around the cycle: until
            // it has gone all the way round, steps can repeat while the cycle fills.
            let filled = sweep >= component.len();
            if let Some(gain) = series.observe(component, &flow).filter(|_| filled) {
                if gain >= UNBOUNDED_GAIN {
                    let node = component.iter().copied().min().unwrap_or(0);
                    return Err(PlanError::Unbounded { node: node as u32 });
                }
                series.jump(component, &mut flow, gain);
            }
        }
    }
    for i in topo.nodes() {
        flow.backward[i] = topo.consumers[i]
            .iter()
            .zip(&flow.out[i])
            .map(|(consumers, rate)| rate * consumers.len().max(1) as f64)
            .sum();
    }
    Ok(flow)
}

/// A cycle's output rates sweep after sweep, to find its gain: the ratio of two
/// successive steps (summed over its ports), once it repeats.
#[derive(Default)]
struct Series {
    /// The rates after the last sweep, and the step that led to them.
    last: Vec<f64>,
    step: Option<Vec<f64>>,
    ratio: Option<f64>,
}

impl Series {
    fn rates(component: &[usize], flow: &Flow) -> Vec<f64> {
        component.iter().flat_map(|&v| flow.out[v].iter().copied()).collect()
    }

    /// Takes the rates after a sweep; the gain once two successive ratios agree.
    fn observe(&mut self, component: &[usize], flow: &Flow) -> Option<f64> {
        let now = Series::rates(component, flow);
        let step: Option<Vec<f64>> =
            (self.last.len() == now.len()).then(|| now.iter().zip(&self.last).map(|(n, l)| n - l).collect());
        let size = |s: &[f64]| s.iter().map(|x| x.abs()).sum::<f64>();
        let ratio = match (&step, &self.step) {
            (Some(now), Some(before)) if size(before) > 0.0 => Some(size(now) / size(before)),
            _ => None,
        };
        let gain = match (ratio, self.ratio) {
            (Some(r), Some(before)) if (r - before).abs() <= RATIO_AGREES * r.max(1.0) => Some(r),
            _ => None,
        };
        self.last = now;
        self.step = step;
        self.ratio = ratio;
        gain
    }

    /// Adds the rest of the geometric series of steps, `step · gain / (1 - gain)`, to
    /// every rate (which the next sweep then settles), and starts observing afresh.
    fn jump(&mut self, component: &[usize], flow: &mut Flow, gain: f64) {
        let Some(step) = self.step.take() else { return };
        let factor = gain / (1.0 - gain);
        let mut steps = step.iter();
        for &v in component {
            for (rate, s) in flow.out[v].iter_mut().zip(steps.by_ref()) {
                *rate = (*rate + s * factor).clamp(0.0, MAX_RATE);
            }
        }
        *self = Series::default();
    }
}

/// The per-node share a `cond` sends to its true port, and the per-port shares of every
/// `switch`, decided once from the graph's shape.
struct Rules {
    cond_true: Vec<f64>,
    switch_share: Vec<Vec<f64>>,
    /// Expected count of `flatmap`, `group` and `scatter_sum` nodes.
    count: Vec<f64>,
}

impl Rules {
    fn new(graph: &Graph, topo: &Topology, a: &Assumptions) -> Rules {
        let n = topo.bound;
        let mut rules = Rules { cond_true: vec![0.5; n], switch_share: vec![Vec::new(); n], count: vec![1.0; n] };
        for i in topo.nodes() {
            let Some(node) = graph.nodes.node_weight(petgraph::stable_graph::NodeIndex::new(i)) else { continue };
            match &node.op {
                Op::Cond { pred } => rules.cond_true[i] = cond_share(topo, i, pred, a),
                Op::Switch { index, arms } => {
                    let arms = (*arms as usize).max(1);
                    let connected: Vec<bool> =
                        (0..arms).map(|p| topo.consumers[i].get(p).is_some_and(|c| !c.is_empty())).collect();
                    let used = connected.iter().filter(|&&c| c).count();
                    // A variant tag picks among all variants (an arm nothing consumes is a
                    // variant whose control is not needed); any other index only ever
                    // picks an arm the lowering connected (a tree's call sites).
                    rules.switch_share[i] = if is_tag(index) || used == 0 {
                        vec![1.0 / arms as f64; arms]
                    } else {
                        connected.iter().map(|&c| if c { 1.0 / used as f64 } else { 0.0 }).collect()
                    };
                }
                Op::Flatmap { field, count } => {
                    let tree = graph.field(*field).is_some_and(|f| f.role == FieldRole::TreeNode);
                    rules.count[i] = expected(count, if tree { a.tree_nodes } else { a.elements }, a.elements);
                }
                Op::Group { count, .. }
                | Op::ScatterSum { count, .. }
                | Op::GatherRows { count, .. }
                | Op::EmbeddingRows { count, .. } => {
                    rules.count[i] = expected(count, a.elements, a.elements);
                }
                _ => {}
            }
        }
        rules
    }

    /// Recomputes node `v`'s output rates from its inputs; returns the largest relative
    /// change.
    fn step(&self, graph: &Graph, topo: &Topology, flow: &mut Flow, v: usize) -> f64 {
        let Some(node) = graph.nodes.node_weight(petgraph::stable_graph::NodeIndex::new(v)) else { return 0.0 };
        let input = |p: usize| -> (f64, f64) {
            match topo.producers[v].get(p).copied().flatten() {
                Some(k) => {
                    let l = topo.links[k];
                    let rate = flow.out[l.from].get(l.from_port).copied().unwrap_or(0.0);
                    let rows = flow.rows[l.from].get(l.from_port).copied().unwrap_or(1.0);
                    (rate, rows)
                }
                None => (0.0, 1.0),
            }
        };
        let inputs = topo.producers[v].len();
        let (rate0, rows0) = input(0);
        let all: f64 = (0..inputs).map(|p| input(p).0).sum();
        let outputs = flow.out[v].len();
        let mut out = vec![rate0; outputs];
        let mut rows = vec![rows0; outputs];
        let mut fires = rate0;
        let mut forward = all;
        match &node.op {
            Op::Source => {
                out = vec![1.0; outputs];
                rows = vec![1.0; outputs];
                fires = 1.0;
                forward = 1.0;
            }
            Op::Flatmap { .. } => out = vec![rate0 * self.count[v]; outputs],
            Op::Ungroup { .. } => out = vec![rate0 * rows0; outputs],
            Op::Group { .. } => {
                let gate = input(1).0;
                out = vec![gate; outputs];
                rows = vec![self.count[v]; outputs];
                fires = gate;
            }
            // One message whatever the rows: a batched map's collection moves as one.
            Op::ScatterSum { .. } | Op::GatherRows { .. } | Op::EmbeddingRows { .. } => {
                rows = vec![self.count[v]; outputs]
            }
            // Each arm gets one message with its share of the rows (even shares expected).
            Op::PartitionRows { arms, .. } => rows = vec![rows0 / f64::from((*arms).max(1)); outputs],
            Op::MergeRows { .. } => rows = vec![(0..inputs).map(|p| input(p).1).sum(); outputs],
            Op::Cond { .. } => {
                let p = self.cond_true[v];
                out = vec![rate0 * p, rate0 * (1.0 - p)];
                out.resize(outputs, 0.0);
            }
            Op::Switch { .. } => {
                out = (0..outputs).map(|p| rate0 * self.switch_share[v].get(p).copied().unwrap_or(0.0)).collect();
            }
            Op::Phi { .. } => {
                let rows_max = (0..inputs).map(|p| input(p).1).fold(1.0f64, f64::max);
                out = vec![all; outputs];
                rows = vec![rows_max; outputs];
                fires = all;
            }
            _ => {}
        }
        for (r, ty) in rows.iter_mut().zip(&node.outputs) {
            if !matches!(ty, PayloadTy::Batch(_)) {
                *r = 1.0;
            }
        }
        let mut change = 0.0f64;
        for (old, new) in flow.out[v].iter_mut().zip(&out) {
            let new = new.clamp(0.0, MAX_RATE);
            change = change.max((new - *old).abs() / (1.0 + new.abs()));
            *old = new;
        }
        flow.rows[v] = rows.into_iter().map(|r| r.clamp(0.0, MAX_RATE)).collect();
        flow.fires[v] = fires.clamp(0.0, MAX_RATE);
        flow.forward[v] = forward.clamp(0.0, MAX_RATE);
        flow.in_rows[v] = rows0.clamp(0.0, MAX_RATE);
        change
    }
}

/// The share of a `cond`'s messages that take its true port. A `cond` with exactly one
/// port inside its cycle is a loop test (or a tree's "is root" test): the staying port
/// gets `T / (T + 1)` for `T` expected turns; any other `cond` splits evenly.
fn cond_share(topo: &Topology, v: usize, pred: &StateExpr, a: &Assumptions) -> f64 {
    let s = topo.scc_of[v];
    if !topo.cyclic.get(s).copied().unwrap_or(false) {
        return 0.5;
    }
    let stays: Vec<bool> =
        topo.consumers[v].iter().map(|edges| edges.iter().any(|&k| topo.scc_of[topo.links[k].to] == s)).collect();
    let staying: Vec<usize> = stays.iter().enumerate().filter(|(_, &s)| s).map(|(p, _)| p).collect();
    let [port] = staying.as_slice() else { return 0.5 };
    let turns = if is_root_test(pred) { (a.tree_nodes - 1.0).max(0.0) } else { loop_turns(pred, a) };
    let stay = turns / (turns + 1.0);
    if *port == 0 {
        stay
    } else {
        1.0 - stay
    }
}

/// Expected iterations of a loop whose test is `pred` (`%t < BOUND` counts from 0).
fn loop_turns(pred: &StateExpr, a: &Assumptions) -> f64 {
    match pred {
        StateExpr::Bin(IntOp::Lt, lhs, bound) if matches!(**lhs, StateExpr::Field(_)) => {
            expected(bound, a.elements, a.trip_count)
        }
        StateExpr::Bin(IntOp::Le, lhs, bound) if matches!(**lhs, StateExpr::Field(_)) => {
            expected(bound, a.elements, a.trip_count) + 1.0
        }
        StateExpr::Bin(IntOp::Gt, bound, rhs) if matches!(**rhs, StateExpr::Field(_)) => {
            expected(bound, a.elements, a.trip_count)
        }
        _ => a.trip_count,
    }
}

/// `$.tree[%n]."$parent" == -1`: the test that a traversal reached its root.
fn is_root_test(pred: &StateExpr) -> bool {
    let parent = |e: &StateExpr| matches!(e, StateExpr::Data(path) if last_field(path) == Some("$parent"));
    let minus_one = |e: &StateExpr| matches!(e, StateExpr::Const(-1));
    match pred {
        StateExpr::Bin(IntOp::Eq, x, y) => (parent(x) && minus_one(y)) || (parent(y) && minus_one(x)),
        _ => false,
    }
}

fn is_tag(index: &StateExpr) -> bool {
    matches!(index, StateExpr::Data(path) if last_field(path) == Some("$tag"))
}

fn last_field(path: &[DataStep]) -> Option<&str> {
    match path.last() {
        Some(DataStep::Field(name)) => Some(name),
        _ => None,
    }
}

/// The expected value of a count: constants are exact, `len(...)` is `length` (the
/// assumed size of a collection or tree), arithmetic combines; anything else read from
/// the data or the state is `unknown`.
fn expected(expr: &StateExpr, length: f64, unknown: f64) -> f64 {
    let value = match expr {
        StateExpr::Const(k) => (*k).max(0) as f64,
        StateExpr::Len(_) => length,
        StateExpr::Bin(op, x, y) => {
            let (x, y) = (expected(x, length, unknown), expected(y, length, unknown));
            match op {
                IntOp::Add => x + y,
                IntOp::Sub => (x - y).max(0.0),
                IntOp::Mul => x * y,
                IntOp::Div if y > 0.0 => x / y,
                _ => unknown,
            }
        }
        _ => unknown,
    };
    value.clamp(0.0, MAX_RATE)
}
