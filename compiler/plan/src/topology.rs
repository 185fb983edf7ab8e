//! The graph as the cost model and the planner walk it: dense per-index tables of each
//! node's producers and consumers, and its strongly connected components (loops, tree
//! traversals) in topological order.

use amp_ir::Graph;
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
        Topology { bound, present, links, producers, consumers, sccs, scc_of, cyclic }
    }

    /// The existing nodes, in index order.
    pub fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.bound).filter(|&i| self.present[i])
    }
}
