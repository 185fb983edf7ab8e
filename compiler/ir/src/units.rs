//! What the executor runs as one node: the one decision the planner and the executor
//! both follow (`amp_plan`'s topology places and charges these units; `amp_exec`'s load
//! builds them), so a plan never predicts nodes apart that run together.
//!
//! **Fused units** ([`fused_units`]). The nodes that share a `fusion` id (NPPT fusion
//! groups, marked by `amp_lower`'s passes) run as one kernel call, together with every
//! `split` that only that group reads: its parts reach the kernel as slices of the split's
//! own input. A unit runs where its first (lowest-index) node is placed. The executor runs
//! a unit node by node instead where it cannot fuse it (the JIT refused the kernel, the
//! group carries batch payloads and has a scalar output, the group reads a group fused
//! before it); the planner does not know those and places the unit as one. A group of
//! batch payloads (a batched map's elementwise chain) absorbs its splits of batches the
//! same way: each part is then a column block of every row of the split's input.
//!
//! **Routing chains** ([`routing_chains`]). Connected `phi`, `cond`, `switch` and `isu`
//! nodes run as one node, their ops in turn on each message. A chain grows from a root (a
//! routing node that joins no producer) along edges that are the only consumer of their
//! port: a routing node joins its producer's chain when it has one input, is that port's
//! only consumer, runs on the producer's worker, and its fanned-out ports (if any) sum
//! their gradients under the root's key (the chain's node sums under the root's key; a
//! node summing under another starts a chain of its own). A cycle of routing nodes with no
//! root stays as it is. Which worker runs a node is the caller's to say ([`ChainNode`]):
//! the executor passes its placement; the planner, which searches placements, asks with
//! every node on one worker and charges a member's messages where a placement cuts it
//! from its producer.
//!
//! **Linear epilogues** ([`linear_epilogues`]). A `linear` whose output's only consumer is
//! an elementwise `unary` (a `relu` after a layer) that no fusion group holds, on the same
//! worker, runs that function on its own output in the same step: the activation's node
//! leaves the table, its messages are the linear's. As with chains, the caller says where
//! nodes run and which may take part (the executor: no replicas).
//!
//! All three work on any graph without panicking; only a verified one gets the
//! executor's guarantees.

use crate::{FieldId, Graph, Op, PayloadTy, UnaryFn};
use petgraph::visit::EdgeRef;
use petgraph::Direction::{Incoming, Outgoing};
use std::collections::{BTreeMap, HashSet};

/// A fusion group with the splits it absorbs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedUnit {
    /// The group's `fusion` id.
    pub group: u32,
    /// The group's nodes, ascending: the unit runs where the first is placed.
    pub nodes: Vec<u32>,
    /// The splits only the group reads, ascending, each with the width of its parts.
    pub splits: Vec<AbsorbedSplit>,
}

/// A `split` a fused unit reads as slices of the split's input port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbsorbedSplit {
    pub node: u32,
    /// Elements per part: part `k` is the input's elements `k * width .. (k + 1) * width`.
    pub width: usize,
}

impl FusedUnit {
    /// The node the unit runs on (its lowest-index group node).
    pub fn lead(&self) -> Option<u32> {
        self.nodes.first().copied()
    }

    /// Every node of the unit: the group's, then its splits.
    pub fn members(&self) -> impl Iterator<Item = u32> + '_ {
        self.nodes.iter().copied().chain(self.splits.iter().map(|s| s.node))
    }

    /// The absorbed split `node`, if it is one.
    pub fn split(&self, node: u32) -> Option<&AbsorbedSplit> {
        self.splits.iter().find(|s| s.node == node)
    }
}

/// Every fusion group of `graph`, by id ascending, with the splits it absorbs.
pub fn fused_units(graph: &Graph) -> Vec<FusedUnit> {
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for index in graph.nodes.node_indices() {
        if let Some(id) = graph.nodes[index].fusion {
            groups.entry(id).or_default().push(index.index() as u32);
        }
    }
    groups
        .into_iter()
        .map(|(group, mut nodes)| {
            nodes.sort_unstable();
            let mut splits: Vec<AbsorbedSplit> = Vec::new();
            for &m in &nodes {
                let Some(index) = node_index(graph, m) else { continue };
                for edge in graph.nodes.edges_directed(index, Incoming) {
                    let source = edge.source().index() as u32;
                    if splits.iter().any(|s| s.node == source) {
                        continue;
                    }
                    if let Some(width) = absorbable_split(graph, source, &nodes) {
                        splits.push(AbsorbedSplit { node: source, width });
                    }
                }
            }
            splits.sort_unstable_by_key(|s| s.node);
            FusedUnit { group, nodes, splits }
        })
        .collect()
}

/// When `node` is a `split` outside every fusion group whose outputs only `members` read,
/// with one `f32` input that its `parts` equal `f32` outputs cover: the width of a part.
/// A split of batches (`f32[?, d]` in, `f32[?, d / parts]` out) qualifies too: its parts
/// are column blocks of every row, and the width is a part's per row.
pub fn absorbable_split(graph: &Graph, node: u32, members: &[u32]) -> Option<usize> {
    let index = node_index(graph, node)?;
    let split = graph.nodes.node_weight(index)?;
    let Op::Split { parts } = split.op else { return None };
    if split.fusion.is_some() {
        return None;
    }
    let (input, batch) = match split.inputs.as_slice() {
        [input @ PayloadTy::F32(_)] => (input, false),
        [input @ PayloadTy::Batch(_)] => (input, true),
        _ => return None,
    };
    if graph.nodes.edges_directed(index, Incoming).count() != 1 {
        return None;
    }
    let read_by_group =
        graph.nodes.edges_directed(index, Outgoing).all(|e| members.contains(&(e.target().index() as u32)));
    let width = split.outputs.first()?.elements();
    let same_kind = |t: &PayloadTy| match t {
        PayloadTy::F32(_) => !batch,
        PayloadTy::Batch(_) => batch,
        PayloadTy::Unit => false,
    };
    let equal_parts = split.outputs.iter().all(|t| same_kind(t) && t.elements() == width);
    let covers = width.checked_mul(u64::from(parts)) == Some(input.elements());
    (read_by_group && equal_parts && covers && split.outputs.len() == parts as usize)
        .then(|| usize::try_from(width).ok())
        .flatten()
}

fn node_index(graph: &Graph, node: u32) -> Option<petgraph::stable_graph::NodeIndex> {
    let index = petgraph::stable_graph::NodeIndex::new(usize::try_from(node).ok()?);
    graph.nodes.contains_node(index).then_some(index)
}

/// Whether an op may be a member of a routing chain.
pub fn is_routing(op: &Op) -> bool {
    matches!(op, Op::Phi { .. } | Op::Cond { .. } | Op::Switch { .. } | Op::Isu { .. })
}

/// One node as the chain rules see it; the table is indexed by node index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainNode {
    /// Whether it may be a member: a routing op ([`is_routing`]), and whatever else the
    /// caller requires (the executor: no replicas).
    pub routing: bool,
    pub worker: usize,
    /// Per input port, the `(node, output port)` feeding it (`u32::MAX` where none does).
    pub producers: Vec<(u32, u16)>,
    /// Per output port, the `(node, input port)` of every consumer edge, sorted.
    pub consumers: Vec<Vec<(u32, u16)>>,
    /// What the gradients of a fanned-out port are summed under (`Node::fan_in_key`).
    pub fan_in_key: Vec<FieldId>,
}

/// The chain table of `graph` with node `i` on `worker(i)`.
pub fn chain_nodes(graph: &Graph, worker: impl Fn(u32) -> usize) -> Vec<Option<ChainNode>> {
    use petgraph::visit::NodeIndexable;
    let mut table: Vec<Option<ChainNode>> = vec![None; graph.nodes.node_bound()];
    for index in graph.nodes.node_indices() {
        let node = &graph.nodes[index];
        let i = index.index() as u32;
        let mut producers = vec![(u32::MAX, 0u16); node.inputs.len()];
        for edge in graph.nodes.edges_directed(index, Incoming) {
            // Edges to ports a node lacks are the verifier's business; skipped here.
            if let Some(slot) = producers.get_mut(usize::from(edge.weight().to_port)) {
                *slot = (edge.source().index() as u32, edge.weight().from_port);
            }
        }
        let mut consumers = vec![Vec::new(); node.outputs.len()];
        for edge in graph.nodes.edges_directed(index, Outgoing) {
            if let Some(list) = consumers.get_mut(usize::from(edge.weight().from_port)) {
                list.push((edge.target().index() as u32, edge.weight().to_port));
            }
        }
        consumers.iter_mut().for_each(|c: &mut Vec<(u32, u16)>| c.sort_unstable());
        if let Some(slot) = table.get_mut(index.index()) {
            *slot = Some(ChainNode {
                routing: is_routing(&node.op),
                worker: worker(i),
                producers,
                consumers,
                fan_in_key: node.fan_in_key(),
            });
        }
    }
    table
}

/// A chain: its members from the root, and how a message moves through them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Node indices, the root first, then in the order met walking from it.
    pub members: Vec<u32>,
    /// Per member and output port: the member it feeds inside the chain, or the chain's
    /// output port it leaves by.
    pub next: Vec<Vec<ChainStep>>,
    /// Per member, the `(member, output port)` feeding it; `None` for the root.
    pub parent: Vec<Option<(usize, u16)>>,
    /// Per output port of the chain, the `(member, output port)` it is.
    pub exits: Vec<(usize, u16)>,
}

/// Where a member's output port goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainStep {
    Member(usize),
    Exit(u16),
}

/// Every chain of two or more members of the table, in the order the executor builds
/// them (a chain's root after the chain it was kept out of).
pub fn routing_chains(nodes: &[Option<ChainNode>]) -> Vec<Chain> {
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    let mut roots: Vec<u32> =
        (0..nodes.len() as u32).filter(|&i| node(i).is_some_and(|n| n.routing && !joins_producer(nodes, i))).collect();
    let mut chains = Vec::new();
    while let Some(root) = roots.pop() {
        let mut kept_out = Vec::new();
        let chain = grow(nodes, root, &mut kept_out);
        roots.extend(kept_out);
        chains.extend(chain.filter(|c| c.members.len() >= 2));
    }
    chains
}

/// Whether node `i` may join its producer's chain: a routing node with one input, the
/// only consumer of a routing node's port on the same worker.
fn joins_producer(nodes: &[Option<ChainNode>], i: u32) -> bool {
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    let Some(n) = node(i) else { return false };
    let [(producer, port)] = n.producers.as_slice() else { return false };
    let Some(p) = node(*producer) else { return false };
    let only_consumer = p.consumers.get(usize::from(*port)).is_some_and(|c| c.len() == 1);
    *producer != i && n.routing && p.routing && p.worker == n.worker && only_consumer
}

fn grow(nodes: &[Option<ChainNode>], root: u32, kept_out: &mut Vec<u32>) -> Option<Chain> {
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    let root_key = &node(root)?.fan_in_key;
    let mut members = vec![root];
    let mut seen = HashSet::from([root]);
    let mut next: Vec<Vec<ChainStep>> = Vec::new();
    let mut parent = vec![None];
    let mut exits = Vec::new();
    let mut at = 0;
    while at < members.len() {
        let mut ports = Vec::new();
        for (port, consumers) in node(members[at])?.consumers.iter().enumerate() {
            let port = u16::try_from(port).ok()?;
            let joining = match consumers.as_slice() {
                [(c, 0)] if joins_producer(nodes, *c) => Some(*c),
                _ => None,
            };
            let joining = joining.filter(|&c| {
                let fanned = node(c).is_some_and(|n| n.consumers.iter().any(|list| list.len() > 1));
                let fits = !fanned || node(c).is_some_and(|n| &n.fan_in_key == root_key);
                if !fits {
                    kept_out.push(c);
                }
                fits
            });
            match joining {
                // A node whose producer is a member is reached once, from that member.
                Some(c) if seen.insert(c) => {
                    ports.push(ChainStep::Member(members.len()));
                    parent.push(Some((at, port)));
                    members.push(c);
                }
                _ => {
                    ports.push(ChainStep::Exit(u16::try_from(exits.len()).ok()?));
                    exits.push((at, port));
                }
            }
        }
        next.push(ports);
        at += 1;
    }
    Some(Chain { members, next, parent, exits })
}

/// What a node may be in a linear epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpilogueRole {
    /// A `linear`, which may take an epilogue.
    Linear,
    /// An elementwise `unary` that no fusion group holds, which may be one.
    Activation(UnaryFn),
    Other,
}

/// One node as the epilogue rule sees it; the table is indexed by node index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpilogueNode {
    pub role: EpilogueRole,
    pub worker: usize,
    /// Per output port, the `(node, input port)` of every consumer edge.
    pub consumers: Vec<Vec<(u32, u16)>>,
}

/// A linear and the activation it runs on its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epilogue {
    pub linear: u32,
    pub activation: u32,
    pub f: UnaryFn,
}

/// The role of an IR op: the planner's view, with no replicas and nothing fused but by the
/// graph's `fusion` marks.
pub fn epilogue_role(op: &Op, fusion: Option<u32>) -> EpilogueRole {
    match op {
        Op::Linear { .. } => EpilogueRole::Linear,
        Op::Unary(f) if fusion.is_none() && f.is_elementwise() => EpilogueRole::Activation(*f),
        _ => EpilogueRole::Other,
    }
}

/// The epilogue table of `graph` with node `i` on `worker(i)`.
pub fn epilogue_nodes(graph: &Graph, worker: impl Fn(u32) -> usize) -> Vec<Option<EpilogueNode>> {
    chain_nodes(graph, &worker)
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let node = graph.nodes.node_weight(petgraph::graph::NodeIndex::new(i))?;
            let role = epilogue_role(&node.op, node.fusion);
            n.map(|n| EpilogueNode { role, worker: n.worker, consumers: n.consumers })
        })
        .collect()
}

/// Every linear of the table whose one output port has one consumer edge, into port 0 of
/// an activation on its worker: that activation runs as the linear's epilogue.
pub fn linear_epilogues(nodes: &[Option<EpilogueNode>]) -> Vec<Epilogue> {
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    (0..nodes.len() as u32)
        .filter_map(|linear| {
            let l = node(linear).filter(|l| l.role == EpilogueRole::Linear)?;
            let [only] = l.consumers.as_slice() else { return None };
            let &[(activation, 0)] = only.as_slice() else { return None };
            let a = node(activation).filter(|a| a.worker == l.worker && activation != linear)?;
            match a.role {
                EpilogueRole::Activation(f) => Some(Epilogue { linear, activation, f }),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate chain grouped as `fusion(0)`, fed by a three-way split; on vectors, or on
    /// batches (`f32[?, n]`, a batched map's body) where `batch`.
    fn fused(add_in_group: bool, batch: bool) -> Graph {
        let tag = if add_in_group { " fusion(0)" } else { "" };
        let t = |n: u32| if batch { format!("f32[?, {n}]") } else { format!("f32[{n}]") };
        let (v4, v12) = (t(4), t(12));
        let text = format!(
            r#"amp.graph @Fused {{
  state %inst: instance
  param a.weight: f32[12, 4] uniform(4)
  param a.bias: f32[12] uniform(4)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> {v4} "read"
  %2 = linear @a (%1#0: {v4}) -> {v12} key(%inst) "a"
  %3 = split 3 (%2#0: {v12}) -> {v4}, {v4}, {v4} key(%inst) "split"
  %4 = unary sigmoid (%3#0: {v4}) -> {v4} key(%inst) "sigmoid" fusion(0)
  %5 = unary tanh (%3#1: {v4}) -> {v4} key(%inst) "tanh" fusion(0)
  %6 = binary mul (%4#0: {v4}, %5#0: {v4}) -> {v4} key(%inst) "*" fusion(0)
  %7 = binary add (%6#0: {v4}, %3#2: {v4}) -> {v4} key(%inst) "+"{tag}
  %8 = sink "out" (%7#0: {v4}) -> () "out"
}}
"#
        );
        crate::text::parse(&text).expect("the test graph parses")
    }

    #[test]
    fn a_group_absorbs_the_split_only_it_reads() {
        let units = fused_units(&fused(true, false));
        assert_eq!(
            units,
            [FusedUnit { group: 0, nodes: vec![4, 5, 6, 7], splits: vec![AbsorbedSplit { node: 3, width: 4 }] }]
        );
        assert_eq!(units[0].lead(), Some(4));
        assert_eq!(units[0].members().collect::<Vec<_>>(), [4, 5, 6, 7, 3]);
    }

    #[test]
    fn a_split_read_outside_the_group_stays_out() {
        let graph = fused(false, false);
        let units = fused_units(&graph);
        assert_eq!(units, [FusedUnit { group: 0, nodes: vec![4, 5, 6], splits: Vec::new() }]);
        // Read only by the group's nodes plus %7, it would join a group holding %7.
        assert_eq!(absorbable_split(&graph, 3, &[4, 5, 6, 7]), Some(4));
        assert_eq!(absorbable_split(&graph, 2, &[3]), None, "not a split");
    }

    /// The same graph on batches: the split's parts are column blocks of every row,
    /// absorbed alike, `width` being a part's per row; read outside the group, it stays.
    #[test]
    fn a_group_of_batches_absorbs_its_split_of_batches() {
        let graph = fused(true, true);
        let split = &graph.nodes[petgraph::stable_graph::NodeIndex::new(3)];
        assert_eq!(split.inputs, [PayloadTy::Batch(vec![12])]);
        assert_eq!(
            fused_units(&graph),
            [FusedUnit { group: 0, nodes: vec![4, 5, 6, 7], splits: vec![AbsorbedSplit { node: 3, width: 4 }] }]
        );
        assert_eq!(fused_units(&fused(false, true))[0].splits, []);
    }

    /// `%3 isu` (fed by a linear: a root) → `%4 switch`, whose two ports feed `%5 phi`.
    const ROUTING: &str = r#"amp.graph @Routing {
  state %inst: instance, %f: counter
  param a.weight: f32[8, 8] uniform(8)
  param a.bias: f32[8] uniform(8)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[8] "read"
  %2 = linear @a (%1#0: f32[8]) -> f32[8] key(%inst) "a"
  %3 = isu %f := 1 inverse 0 (%2#0: f32[8]) -> f32[8] writes(%f) "isu"
  %4 = switch [%f] 2 (%3#0: f32[8]) -> f32[8], f32[8] "route"
  %5 = phi 2 (%4#0: f32[8], %4#1: f32[8]) -> f32[8] key(%inst) "merge"
  %6 = sink "out" (%5#0: f32[8]) -> () "out"
}
"#;

    #[test]
    fn a_chain_holds_routing_nodes_on_one_worker() {
        let graph = crate::text::parse(ROUTING).expect("parses");
        let chains = routing_chains(&chain_nodes(&graph, |_| 0));
        // The phi has two inputs: it joins nothing, and leads a chain of one (not listed).
        assert_eq!(
            chains,
            [Chain {
                members: vec![3, 4],
                next: vec![vec![ChainStep::Member(1)], vec![ChainStep::Exit(0), ChainStep::Exit(1)]],
                parent: vec![None, Some((0, 0))],
                exits: vec![(1, 0), (1, 1)],
            }]
        );
        // On another worker than its producer, the switch is a chain of its own.
        assert!(routing_chains(&chain_nodes(&graph, |i| usize::from(i == 4))).is_empty());
    }

    fn chain_node(producers: &[(u32, u16)], consumers: &[&[(u32, u16)]], routing: bool) -> Option<ChainNode> {
        Some(ChainNode {
            routing,
            worker: 0,
            producers: producers.to_vec(),
            consumers: consumers.iter().map(|c| c.to_vec()).collect(),
            fan_in_key: vec![FieldId(0)],
        })
    }

    /// %0 → %1 → %2, whose port 0 fans out to %3 and %4 and port 1 feeds %5 → %6 → %7;
    /// %1, %2, %5 and %6 route. With %2 summing its fan-out under %1's key, one chain of
    /// four; under another, %2 leads a chain of its own after %1's (of one, not listed).
    #[test]
    fn a_fanned_out_port_joins_only_under_the_roots_key() {
        let table = |cond_key: Vec<FieldId>| {
            let mut nodes = vec![
                chain_node(&[], &[&[(1, 0)]], false),
                chain_node(&[(0, 0)], &[&[(2, 0)]], true),
                chain_node(&[(1, 0)], &[&[(3, 0), (4, 0)], &[(5, 0)]], true),
                chain_node(&[(2, 0)], &[], false),
                chain_node(&[(2, 0)], &[], false),
                chain_node(&[(2, 1)], &[&[(6, 0)]], true),
                chain_node(&[(5, 0)], &[&[(7, 0)]], true),
                chain_node(&[(6, 0)], &[], false),
            ];
            if let Some(cond) = nodes[2].as_mut() {
                cond.fan_in_key = cond_key;
            }
            nodes
        };
        let same = routing_chains(&table(vec![FieldId(0)]));
        assert_eq!(same.iter().map(|c| c.members.clone()).collect::<Vec<_>>(), [vec![1, 2, 5, 6]]);
        assert_eq!(same[0].exits, [(1, 0), (3, 0)], "exits in the order met");
        let other = routing_chains(&table(vec![FieldId(0), FieldId(1)]));
        assert_eq!(other.iter().map(|c| c.members.clone()).collect::<Vec<_>>(), [vec![2, 5, 6]]);
    }

    /// A cycle of routing nodes with no way in from outside has no root: no chain.
    #[test]
    fn a_rootless_cycle_stays_as_it_is() {
        let nodes = vec![chain_node(&[(1, 0)], &[&[(1, 0)]], true), chain_node(&[(0, 0)], &[&[(0, 0)]], true)];
        assert!(routing_chains(&nodes).is_empty());
    }

    /// `a` feeds only a relu, which takes it as its epilogue; `b` feeds a tanh and a sink
    /// (two consumers); `c`'s sigmoid is in a fusion group.
    fn activations() -> Graph {
        let text = r#"amp.graph @Epilogues {
  state %inst: instance
  param a.weight: f32[4, 4] uniform(4)
  param a.bias: f32[4] uniform(4)
  param b.weight: f32[4, 4] uniform(4)
  param b.bias: f32[4] uniform(4)
  param c.weight: f32[4, 4] uniform(4)
  param c.bias: f32[4] uniform(4)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = read $.x (%0#0: unit) -> f32[4] "read"
  %2 = linear @a (%1#0: f32[4]) -> f32[4] key(%inst) "a"
  %3 = unary relu (%2#0: f32[4]) -> f32[4] key(%inst) "relu"
  %4 = linear @b (%3#0: f32[4]) -> f32[4] key(%inst) "b"
  %5 = unary tanh (%4#0: f32[4]) -> f32[4] key(%inst) "tanh"
  %6 = sink "b" (%4#0: f32[4]) -> () "b"
  %7 = linear @c (%5#0: f32[4]) -> f32[4] key(%inst) "c"
  %8 = unary sigmoid (%7#0: f32[4]) -> f32[4] key(%inst) "sigmoid" fusion(0)
  %9 = sink "out" (%8#0: f32[4]) -> () "out"
}
"#;
        crate::text::parse(text).expect("the test graph parses")
    }

    #[test]
    fn a_linear_takes_the_activation_that_alone_reads_it_on_its_worker() {
        let graph = activations();
        let found = linear_epilogues(&epilogue_nodes(&graph, |_| 0));
        assert_eq!(found, [Epilogue { linear: 2, activation: 3, f: UnaryFn::Relu }]);
        let apart = linear_epilogues(&epilogue_nodes(&graph, |i| usize::from(i == 3)));
        assert!(apart.is_empty(), "a worker's border keeps them apart: {apart:?}");
    }
}
