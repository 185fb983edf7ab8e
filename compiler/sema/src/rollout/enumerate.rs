//! Every valid pattern of a small network, with its inference factor.
//!
//! The patterns are searched edge by edge, delay 0 before delay 1, and a branch is cut
//! as soon as its undelayed edges close a cycle (an edge u -> v undelayed while v already
//! reaches u undelayed), so only valid patterns are ever completed. Patterns come out in
//! lexicographic order of their delays, edges in declaration order.

use super::{inference_factor, Edge, Pattern, RolloutError, RolloutGraph, RolloutNode, MAX_ENUMERATED_EDGES};

/// One valid pattern and its F(R).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enumerated {
    pub pattern: Pattern,
    pub inference_factor: usize,
}

/// Every valid pattern of `graph`; [`RolloutError::TooManyEdges`] past
/// [`MAX_ENUMERATED_EDGES`] edges.
pub fn enumerate_valid(graph: &RolloutGraph) -> Result<Vec<Enumerated>, RolloutError> {
    let edges = graph.edges.len();
    if edges > MAX_ENUMERATED_EDGES {
        return Err(RolloutError::TooManyEdges { edges, limit: MAX_ENUMERATED_EDGES });
    }
    let (small, floor) = touched_part(graph);
    let mut search =
        Search { graph: &small, delays: Vec::with_capacity(edges), undelayed: Vec::new(), found: Vec::new() };
    search.extend();
    let found = search
        .found
        .into_iter()
        .filter_map(|delays| {
            let small_pattern = Pattern::from_delays(&small, &delays)?;
            // Cannot fail: the search completes valid patterns only.
            let factor = inference_factor(&small, &small_pattern).ok()?.max(floor);
            Some(Enumerated { pattern: Pattern::from_delays(graph, &delays)?, inference_factor: factor })
        })
        .collect();
    Ok(found)
}

/// The nodes that some edge touches, renumbered in declaration order, and the F that
/// the others contribute whatever the pattern: in frame 1 an input is known at step 0, a
/// node with no sources at step 1. A network may declare many nodes but only few edges
/// are enumerated, so each pattern is then analysed in time bounded by its edges.
fn touched_part(graph: &RolloutGraph) -> (RolloutGraph, usize) {
    let mut renumbered: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    for e in &graph.edges {
        renumbered[e.source] = Some(0);
        renumbered[e.target] = Some(0);
    }
    let mut nodes: Vec<RolloutNode> = Vec::new();
    let mut floor = 0;
    for (v, slot) in renumbered.iter_mut().enumerate() {
        match slot {
            Some(index) => {
                *index = nodes.len();
                nodes.push(graph.nodes[v].clone());
            }
            None if !graph.nodes[v].is_input => floor = 1,
            None => {}
        }
    }
    let edges = graph
        .edges
        .iter()
        .map(|e| Edge {
            source: renumbered[e.source].unwrap_or(0),
            target: renumbered[e.target].unwrap_or(0),
            span: e.span,
        })
        .collect();
    (RolloutGraph { name: graph.name.clone(), span: graph.span, nodes, edges }, floor)
}

struct Search<'g> {
    graph: &'g RolloutGraph,
    /// The delays chosen for the first edges.
    delays: Vec<u8>,
    /// The undelayed edges among them, as (source, target).
    undelayed: Vec<(usize, usize)>,
    found: Vec<Vec<u8>>,
}

impl Search<'_> {
    /// Completes the current prefix in every valid way. Recursion depth is the number of
    /// edges, at most [`MAX_ENUMERATED_EDGES`].
    fn extend(&mut self) {
        let Some(edge) = self.graph.edges.get(self.delays.len()).copied() else {
            self.found.push(self.delays.clone());
            return;
        };
        if !self.reaches(edge.target, edge.source) {
            self.delays.push(0);
            self.undelayed.push((edge.source, edge.target));
            self.extend();
            self.undelayed.pop();
            self.delays.pop();
        }
        self.delays.push(1);
        self.extend();
        self.delays.pop();
    }

    /// Whether `to` can be reached from `from` along the undelayed edges chosen so far
    /// (a node reaches itself, so an undelayed self-loop is refused).
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut seen = vec![false; self.graph.nodes.len()];
        let mut stack = vec![from];
        while let Some(v) = stack.pop() {
            if v == to {
                return true;
            }
            if std::mem::replace(&mut seen[v], true) {
                continue;
            }
            stack.extend(self.undelayed.iter().filter(|&&(s, _)| s == v).map(|&(_, t)| t));
        }
        false
    }
}
