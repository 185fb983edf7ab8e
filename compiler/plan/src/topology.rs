//! The graph as the cost model and the planner walk it: dense per-index tables of each
//! node's producers and consumers, its strongly connected components (loops, tree
//! traversals) in topological order, and the units the executor runs as one node.
//!
//! What runs as one node is decided by `amp_ir::units`, for the executor and for this
//! model alike.
//!
//! **Units.** With the JIT on (amprun's default) the executor replaces each fused unit (a
//! fusion group and every `split` only it reads) by one node that calls its kernel, on
//! the worker of the group's first node. The planner therefore places a unit as one:
//! splitting it would predict a placement the executor does not follow. A unit's
//! representative is its lowest-index group node; every other node is a unit of its own.
//!
//! **Routing chains.** The executor also runs connected `phi`, `cond`, `switch` and `isu`
//! nodes as one node when they share a worker: a message goes through the whole chain in
//! one worker step. These are not units (the executor forms a chain only where the
//! placement keeps its nodes together); the cost model charges a member's messages only
//! when it sits on another worker than its producer.

use amp_ir::{units, Graph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};

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
    /// Whether the node runs in its producer's step when the two share a worker (a routing
    /// chain's member, a linear's epilogue: see [`chain_members`]).
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

/// The representative of every node's unit: the nodes of a fused unit
/// (`amp_ir::units::fused_units`: a fusion group and the splits only it reads) share its
/// lead (the lowest-index group node); everything else stands alone.
fn fused_units(graph: &Graph, topo: &Topology) -> Vec<usize> {
    let mut unit_of: Vec<usize> = (0..topo.bound).collect();
    for unit in units::fused_units(graph) {
        let Some(lead) = unit.lead() else { continue };
        for m in unit.members() {
            if let Some(slot) = unit_of.get_mut(m as usize) {
                *slot = lead as usize;
            }
        }
    }
    unit_of
}

/// Whether each node runs in its producer's step when the two share a worker: the
/// members, other than the roots, of the chains `amp_ir::units::routing_chains` finds
/// with every node on one worker, and the activations `amp_ir::units::linear_epilogues`
/// finds there. A placement that puts one elsewhere than its producer cuts it off there
/// (and the cost model charges that edge).
fn chain_members(graph: &Graph, topo: &Topology) -> Vec<bool> {
    let mut chained = vec![false; topo.bound];
    let chains = units::routing_chains(&units::chain_nodes(graph, |_| 0));
    let members = chains.iter().flat_map(|chain| chain.members.iter().skip(1).copied());
    let epilogues = units::linear_epilogues(&units::epilogue_nodes(graph, |_| 0));
    for m in members.chain(epilogues.iter().map(|e| e.activation)) {
        if let Some(slot) = chained.get_mut(m as usize) {
            *slot = true;
        }
    }
    chained
}
