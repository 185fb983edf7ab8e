//! The graph as the cost model and the planner walk it: dense per-index tables of each
//! node's producers and consumers, its strongly connected components (loops, tree
//! traversals) in topological order, and the units the executor runs as one node.
//!
//! **Units.** With the JIT on (amprun's default) the executor replaces each fusion group
//! by one node that calls its kernel, together with every `split` that only the group
//! reads, and puts that node on the worker of the group's first node (`amp_exec`'s
//! `fuse.rs`). The planner therefore places a group and its splits as one unit: splitting
//! it would predict a placement the executor does not follow. A unit's representative is
//! its lowest-index group node; every other node is a unit of its own.
//!
//! **Routing chains.** The executor also runs connected `phi`, `cond`, `switch` and `isu`
//! nodes as one node when they share a worker (`amp_exec`'s `chain.rs`): a message goes
//! through the whole chain in one worker step. These are not units (the executor forms a
//! chain only where the placement keeps its nodes together); the cost model charges a
//! member's messages only when it sits on another worker than its producer.

use amp_ir::{Graph, Op};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};
use std::collections::BTreeMap;

/// One edge, by node index and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub from: usize,
    pub from_port: usize,
    pub to: usize,
    pub to_port: usize,
}

pub(crate) struct Topology {
    /// Node slots (`node_bound`); holes have no entry in `present`.
    pub bound: usize,
    pub present: Vec<bool>,
    /// Every edge, sorted by (from, from_port, to, to_port).
    pub links: Vec<Link>,
    /// Per node and input port, the edge feeding it (an index into `links`).
    pub producers: Vec<Vec<Option<usize>>>,
    /// Per node and output port, the edges leaving it (indices into `links`).
    pub consumers: Vec<Vec<Vec<usize>>>,
    /// The strongly connected components in topological order (producers first), each
    /// with its nodes in index order.
    pub sccs: Vec<Vec<usize>>,
    /// The component of every node (`usize::MAX` for holes).
    pub scc_of: Vec<usize>,
    /// Whether the component is a cycle (more than one node, or a node feeding itself).
    pub cyclic: Vec<bool>,
    /// The representative of every node's unit (itself unless it belongs to a fused group).
    pub unit_of: Vec<usize>,
    /// Whether the node joins its producer's routing chain when the two share a worker
    /// (see [`chain_members`]).
    pub chained: Vec<bool>,
}

impl Topology {
    pub fn new(graph: &Graph) -> Topology {
        let bound = graph.nodes.node_bound();
        let mut present = vec![false; bound];
        let mut producers: Vec<Vec<Option<usize>>> = vec![Vec::new(); bound];
        let mut consumers: Vec<Vec<Vec<usize>>> = vec![Vec::new(); bound];
        for index in graph.nodes.node_indices() {
            let Some(node) = graph.nodes.node_weight(index) else { continue };
            let i = index.index();
            present[i] = true;
            producers[i] = vec![None; node.inputs.len()];
            consumers[i] = vec![Vec::new(); node.outputs.len()];
        }
        let mut links: Vec<Link> = graph
            .nodes
            .edge_references()
            .map(|e| Link {
                from: e.source().index(),
                from_port: usize::from(e.weight().from_port),
                to: e.target().index(),
                to_port: usize::from(e.weight().to_port),
            })
            .collect();
        links.sort_unstable_by_key(|l| (l.from, l.from_port, l.to, l.to_port));
        for (k, link) in links.iter().enumerate() {
            // Edges to ports a node lacks are the verifier's business; the model skips them.
            if let Some(slot) = producers.get_mut(link.to).and_then(|p| p.get_mut(link.to_port)) {
                *slot = Some(k);
            }
            if let Some(list) = consumers.get_mut(link.from).and_then(|c| c.get_mut(link.from_port)) {
                list.push(k);
            }
        }
        // Tarjan lists components in reverse topological order.
        let mut sccs: Vec<Vec<usize>> = petgraph::algo::tarjan_scc(&graph.nodes)
            .into_iter()
            .rev()
            .map(|c| {
                let mut nodes: Vec<usize> = c.into_iter().map(|n| n.index()).collect();
                nodes.sort_unstable();
                nodes
            })
            .collect();
        sccs.retain(|c| !c.is_empty());
        let mut scc_of = vec![usize::MAX; bound];
        for (s, component) in sccs.iter().enumerate() {
            for &n in component {
                scc_of[n] = s;
            }
        }
        let mut cyclic: Vec<bool> = sccs.iter().map(|c| c.len() > 1).collect();
        for link in &links {
            if link.from == link.to {
                cyclic[scc_of[link.from]] = true;
            }
        }
        let mut topo = Topology {
            bound,
            present,
            links,
            producers,
            consumers,
            sccs,
            scc_of,
            cyclic,
            unit_of: Vec::new(),
            chained: Vec::new(),
        };
        topo.unit_of = fused_units(graph, &topo);
        topo.chained = chain_members(graph, &topo);
        topo
    }

    /// Whether `v` stands for its unit (the search moves representatives; the other
    /// members follow).
    pub fn leads(&self, v: usize) -> bool {
        self.unit_of[v] == v
    }

    /// The existing nodes, in index order.
    pub fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.bound).filter(|&i| self.present[i])
    }
}

/// The representative of every node's unit: a fusion group's nodes and the splits read
/// only by that group share their lowest-index group node; everything else stands alone.
fn fused_units(graph: &Graph, topo: &Topology) -> Vec<usize> {
    let mut unit_of: Vec<usize> = (0..topo.bound).collect();
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for index in graph.nodes.node_indices() {
        if let Some(id) = graph.nodes[index].fusion {
            groups.entry(id).or_default().push(index.index());
        }
    }
    for members in groups.values() {
        // Node indices come in increasing order: the first is the lowest.
        let Some(&lead) = members.first() else { continue };
        if members.len() < 2 {
            continue;
        }
        for &m in members {
            unit_of[m] = lead;
        }
        // The splits feeding the group that nothing else reads.
        for &m in members {
            for link in topo.producers[m].iter().flatten().map(|&k| topo.links[k]) {
                let split = link.from;
                let is_split = graph
                    .nodes
                    .node_weight(petgraph::stable_graph::NodeIndex::new(split))
                    .is_some_and(|n| matches!(n.op, Op::Split { .. }) && n.fusion.is_none());
                let only_group = topo.consumers[split].iter().flatten().all(|&k| members.contains(&topo.links[k].to));
                if is_split && only_group && unit_of[split] == split {
                    unit_of[split] = lead;
                }
            }
        }
    }
    unit_of
}

/// Whether each node joins its producer's routing chain when the two share a worker, by
/// the executor's rules (`amp_exec`'s `chain.rs`): a chain grows from a root (a routing
/// node that joins no producer) along edges that are the only consumer of their port, to
/// routing nodes with one input whose fanned-out ports (if any) sum their gradients under
/// the root's key; a node summing under another key starts a chain of its own. Routing
/// nodes on a cycle with no root stay alone.
fn chain_members(graph: &Graph, topo: &Topology) -> Vec<bool> {
    let node = |v: usize| graph.nodes.node_weight(petgraph::stable_graph::NodeIndex::new(v));
    let routing = |v: usize| {
        node(v).is_some_and(|n| matches!(n.op, Op::Phi { .. } | Op::Cond { .. } | Op::Switch { .. } | Op::Isu { .. }))
    };
    // The link from the producer this node would join, when it may.
    let joins = |v: usize| -> Option<usize> {
        let [Some(k)] = topo.producers[v].as_slice() else { return None };
        let link = topo.links[*k];
        let only = topo.consumers[link.from].get(link.from_port).is_some_and(|c| c.len() == 1);
        (routing(v) && routing(link.from) && link.from != v && only).then_some(*k)
    };
    let fan_in_key = |v: usize| node(v).map_or_else(|| vec![amp_ir::FieldId(0)], amp_ir::Node::fan_in_key);
    let mut chained = vec![false; topo.bound];
    let mut roots: Vec<usize> = topo.nodes().filter(|&v| routing(v) && joins(v).is_none()).collect();
    let mut seen = vec![false; topo.bound];
    while let Some(root) = roots.pop() {
        let root_key = fan_in_key(root);
        let mut members = vec![root];
        seen[root] = true;
        while let Some(m) = members.pop() {
            for list in &topo.consumers[m] {
                let [k] = list.as_slice() else { continue };
                let c = topo.links[*k].to;
                if seen[c] || joins(c).is_none() {
                    continue;
                }
                let fanned = topo.consumers[c].iter().any(|l| l.len() > 1);
                seen[c] = true;
                if fanned && fan_in_key(c) != root_key {
                    roots.push(c);
                } else {
                    chained[c] = true;
                    members.push(c);
                }
            }
        }
    }
    chained
}
