//! Graph passes run after lowering. Each pass first decides what to change while reading
//! the graph, then applies the changes, and returns a [`PassReport`] of what it did; no
//! graph is mutated while it is being walked. `StableGraph` keeps node indices valid
//! across deletions, so reports and locations stay meaningful.

use amp_ir::{ConstValue, Edge, Graph, Node, Op, PayloadTy};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use petgraph::Direction::{Incoming, Outgoing};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// What one pass changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassReport {
    pub pass: &'static str,
    /// How many nodes were removed, replaced or marked.
    pub changed: usize,
    pub details: Vec<String>,
}

/// Runs every pass to a fixpoint (at most a few rounds) and returns their reports. Key
/// minimisation runs last because the other passes change fan-out.
pub fn optimize(graph: &mut Graph) -> Vec<PassReport> {
    let mut reports = Vec::new();
    for _ in 0..8 {
        let round = [fold_constants(graph), eliminate_common_subexpressions(graph), eliminate_dead_nodes(graph)];
        let changed = round.iter().any(|r| r.changed > 0);
        reports.extend(round.into_iter().filter(|r| r.changed > 0));
        if !changed {
            break;
        }
    }
    reports.push(minimize_keys(graph));
    reports.push(group_fusable_nppts(graph));
    reports
}

/// Lowering gives every node its full dynamic context as key: the instance, plus the
/// counter of every enclosing loop. This pass keeps it only on nodes that need a key:
/// nodes that cache activations for the backward pass, nodes that join several inputs or
/// split into several outputs (their messages are matched by key), and nodes whose output
/// fans out (their backward pass sums the gradients of all consumers by key). Every other
/// node gets an empty key: it remembers nothing. What remains is the minimal set of
/// fields that keeps the activations of different instances and iterations apart (see
/// `docs/IR.md`).
pub fn minimize_keys(graph: &mut Graph) -> PassReport {
    let indices: Vec<NodeIndex> = graph.nodes.node_indices().collect();
    let mut cleared = Vec::new();
    for idx in indices {
        let node = &graph.nodes[idx];
        let fans_out = graph.fans_out(idx);
        let needs_key = amp_ir::verify::key_reason(node, fans_out).is_some();
        if !needs_key && !node.key.is_empty() {
            cleared.push(idx);
        }
    }
    let details = cleared.iter().map(|&i| describe(graph, i)).collect();
    for &i in &cleared {
        if let Some(node) = graph.nodes.node_weight_mut(i) {
            node.key.clear();
        }
    }
    PassReport { pass: "key minimisation", changed: cleared.len(), details }
}

fn describe(graph: &Graph, idx: NodeIndex) -> String {
    graph
        .nodes
        .node_weight(idx)
        .map_or_else(|| format!("%{}", idx.index()), |n| format!("%{} {} `{}`", idx.index(), n.op.keyword(), n.label))
}

/// Removes nodes whose results reach no `loss` and no `sink`: nothing would ever consume
/// them, and in training their backward pass would wait forever.
pub fn eliminate_dead_nodes(graph: &mut Graph) -> PassReport {
    let mut live: HashSet<NodeIndex> = HashSet::new();
    let mut queue: VecDeque<NodeIndex> = graph
        .nodes
        .node_indices()
        .filter(|&i| matches!(graph.nodes[i].op, Op::Loss(_) | Op::Sink { .. } | Op::Source))
        .collect();
    live.extend(queue.iter().copied());
    while let Some(n) = queue.pop_front() {
        for pred in graph.nodes.neighbors_directed(n, Incoming) {
            if live.insert(pred) {
                queue.push_back(pred);
            }
        }
    }
    let dead: Vec<NodeIndex> = graph.nodes.node_indices().filter(|i| !live.contains(i)).collect();
    let details = dead.iter().map(|&i| describe(graph, i)).collect();
    for &i in &dead {
        graph.nodes.remove_node(i);
    }
    PassReport { pass: "dead-node elimination", changed: dead.len(), details }
}

/// The uniform value a node produces, when it is a constant.
fn uniform(node: &Node) -> Option<f32> {
    match node.op {
        Op::Const { value: ConstValue::Zeros } => Some(0.0),
        Op::Const { value: ConstValue::Ones } => Some(1.0),
        Op::Const { value: ConstValue::Scalar(v) } => Some(v),
        _ => None,
    }
}

fn const_value(v: f32) -> ConstValue {
    if v.to_bits() == 0.0f32.to_bits() {
        ConstValue::Zeros
    } else if v == 1.0 {
        ConstValue::Ones
    } else {
        ConstValue::Scalar(v)
    }
}

/// Replaces elementwise nodes whose inputs are all uniform constants by a constant,
/// triggered by the control input of the first of those constants.
pub fn fold_constants(graph: &mut Graph) -> PassReport {
    let mut folds: Vec<(NodeIndex, ConstValue, NodeIndex, Edge)> = Vec::new();
    for idx in graph.nodes.node_indices() {
        let node = &graph.nodes[idx];
        let inputs: Vec<NodeIndex> = graph.input_edges(idx).into_iter().flatten().map(|e| e.0).collect();
        if inputs.len() != node.inputs.len() {
            continue;
        }
        let values: Option<Vec<f32>> = inputs.iter().map(|&i| uniform(&graph.nodes[i])).collect();
        let Some(values) = values else { continue };
        let folded = match (&node.op, values.as_slice()) {
            // With the scalar functions the executor runs, so a folded value is what the
            // node would have computed. A row-wise function of a constant vector is uniform
            // too, but only its length knows the value: not folded.
            (Op::Unary(f), [x]) => f.scalar().map(|s| (s.forward)(*x)),
            (Op::Binary(f), [a, b]) => Some((f.scalar().forward)(*a, *b)),
            _ => None,
        };
        let (Some(v), Some(&first)) = (folded, inputs.first()) else { continue };
        if !v.is_finite() {
            continue; // keep NaN and infinities where the runtime reports them
        }
        let Some(trigger) = graph.input_edge(first, 0) else { continue };
        folds.push((idx, const_value(v), trigger.0, trigger.1));
    }
    let mut details = Vec::new();
    for (idx, value, trigger, edge) in &folds {
        details.push(format!("{} -> const {value:?}", describe(graph, *idx)));
        let incoming: Vec<_> = graph.nodes.edges_directed(*idx, Incoming).map(|e| e.id()).collect();
        for e in incoming {
            graph.nodes.remove_edge(e);
        }
        if let Some(node) = graph.nodes.node_weight_mut(*idx) {
            node.op = Op::Const { value: *value };
            node.inputs = vec![PayloadTy::Unit];
            node.reads.clear();
            node.key.clear();
        }
        graph.nodes.add_edge(*trigger, *idx, Edge { from_port: edge.from_port, to_port: 0 });
    }
    PassReport { pass: "constant folding", changed: folds.len(), details }
}

/// Merges nodes that compute the same thing from the same inputs in the same context.
pub fn eliminate_common_subexpressions(graph: &mut Graph) -> PassReport {
    let mut seen: HashMap<String, NodeIndex> = HashMap::new();
    let mut merges: Vec<(NodeIndex, NodeIndex)> = Vec::new();
    let mut order: Vec<NodeIndex> = graph.nodes.node_indices().collect();
    order.sort();
    for idx in order {
        let node = &graph.nodes[idx];
        if matches!(node.op, Op::Source | Op::Sink { .. } | Op::Loss(_) | Op::Phi { .. }) {
            continue;
        }
        let inputs: Vec<String> = graph
            .input_edges(idx)
            .into_iter()
            .map(|e| e.map_or("_".into(), |(n, e)| format!("{}#{}", n.index(), e.from_port)))
            .collect();
        // Ops print their attributes fully in Debug form: equal text means equal work.
        let signature =
            format!("{:?}|{:?}|{:?}|{:?}|{}", node.op, node.inputs, node.outputs, node.key, inputs.join(","));
        match seen.get(&signature) {
            Some(&original) => merges.push((idx, original)),
            None => {
                seen.insert(signature, idx);
            }
        }
    }
    let mut details = Vec::new();
    for (dup, original) in &merges {
        details.push(format!("{} = {}", describe(graph, *dup), describe(graph, *original)));
        let outgoing: Vec<(NodeIndex, Edge)> =
            graph.nodes.edges_directed(*dup, Outgoing).map(|e| (e.target(), *e.weight())).collect();
        for (target, edge) in outgoing {
            graph.nodes.add_edge(*original, target, edge);
        }
        graph.nodes.remove_node(*dup);
    }
    PassReport { pass: "common-subexpression elimination", changed: merges.len(), details }
}

fn fusable(op: &Op) -> bool {
    match op {
        Op::Unary(_) | Op::Binary(_) => amp_ir::Elementwise::of_op(op).is_some(),
        _ => false,
    }
}

/// Splits groups until none is re-entered: a fused group runs as one node, so a value that
/// leaves it and comes back (`h * sum(h * q)`: the `reduce` reads the group and feeds it)
/// would wait for the group's own output. A member reached from another through a node
/// outside the group, and everything after it, goes to a group of its own (the members
/// before it keep theirs). Paths follow forward edges (a lower node index to a higher one:
/// lowering creates a node after its operands, and only a loop's back edge into its `phi`
/// runs the other way, carrying the next iteration's message, another kernel call), within
/// the group's index range.
fn convex_groups(graph: &Graph, groups: Vec<Vec<NodeIndex>>) -> Vec<Vec<NodeIndex>> {
    let mut done = Vec::new();
    // In order, so that a graph without re-entered groups keeps its group numbers.
    for group in groups {
        let mut pending = VecDeque::from([group]);
        while let Some(group) = pending.pop_front() {
            let tainted = reentered(graph, &group);
            if tainted.is_empty() {
                done.push(group);
                continue;
            }
            let (moved, kept): (Vec<NodeIndex>, Vec<NodeIndex>) = group.into_iter().partition(|n| tainted.contains(n));
            pending.extend(components(graph, &kept));
            pending.extend(components(graph, &moved));
        }
    }
    done
}

/// The members of `group` downstream of a path that leaves it (see [`convex_groups`]).
fn reentered(graph: &Graph, group: &[NodeIndex]) -> BTreeSet<NodeIndex> {
    let members: BTreeSet<NodeIndex> = group.iter().copied().collect();
    let (Some(&first), Some(&last)) = (members.first(), members.last()) else { return BTreeSet::new() };
    let forward =
        |from: NodeIndex| graph.nodes.neighbors_directed(from, Outgoing).filter(move |&to| to > from && to <= last);
    let mut tainted = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<NodeIndex> =
        members.iter().flat_map(|&m| forward(m)).filter(|to| !members.contains(to) && *to > first).collect();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        if members.contains(&n) {
            tainted.insert(n);
        }
        stack.extend(forward(n).filter(|to| !seen.contains(to)));
    }
    tainted
}

/// The connected parts of `nodes` (edges between them in either direction).
fn components(graph: &Graph, nodes: &[NodeIndex]) -> Vec<Vec<NodeIndex>> {
    let set: BTreeSet<NodeIndex> = nodes.iter().copied().collect();
    let mut seen = BTreeSet::new();
    let mut parts = Vec::new();
    for &start in nodes {
        if !seen.insert(start) {
            continue;
        }
        let (mut part, mut stack) = (vec![start], vec![start]);
        while let Some(n) = stack.pop() {
            for m in graph.nodes.neighbors_undirected(n) {
                if set.contains(&m) && seen.insert(m) {
                    part.push(m);
                    stack.push(m);
                }
            }
        }
        parts.push(part);
    }
    parts
}

/// Marks maximal connected groups of elementwise nodes in the same context (same key
/// fields) as fusion groups, for the JIT to compile into one kernel each.
pub fn group_fusable_nppts(graph: &mut Graph) -> PassReport {
    let mut group_of: BTreeMap<NodeIndex, usize> = BTreeMap::new();
    let mut groups: Vec<Vec<NodeIndex>> = Vec::new();
    let candidates: Vec<NodeIndex> = graph.nodes.node_indices().filter(|&i| fusable(&graph.nodes[i].op)).collect();
    for &start in &candidates {
        if group_of.contains_key(&start) {
            continue;
        }
        let id = groups.len();
        let mut members = vec![start];
        group_of.insert(start, id);
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            let neighbours: Vec<NodeIndex> = graph.nodes.neighbors_undirected(n).collect();
            for m in neighbours {
                let same_context = graph.nodes[m].key == graph.nodes[start].key
                    || graph.nodes[m].key.is_empty()
                    || graph.nodes[start].key.is_empty();
                if fusable(&graph.nodes[m].op) && same_context && !group_of.contains_key(&m) {
                    group_of.insert(m, id);
                    members.push(m);
                    stack.push(m);
                }
            }
        }
        groups.push(members);
    }
    let groups = convex_groups(graph, groups);
    let mut details = Vec::new();
    let mut next = 0u32;
    for node in graph.nodes.node_weights_mut() {
        node.fusion = None;
    }
    for members in groups.iter().filter(|m| m.len() >= 2) {
        let mut sorted = members.clone();
        sorted.sort();
        details.push(format!(
            "group {next}: {}",
            sorted.iter().map(|i| format!("%{}", i.index())).collect::<Vec<_>>().join(" ")
        ));
        for &i in &sorted {
            if let Some(node) = graph.nodes.node_weight_mut(i) {
                node.fusion = Some(next);
            }
        }
        next += 1;
    }
    PassReport {
        pass: "NPPT fusion grouping",
        changed: groups.iter().filter(|m| m.len() >= 2).map(Vec::len).sum(),
        details,
    }
}
