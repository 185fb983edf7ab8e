//! Validity, the inference tableau and the inference factor of one pattern.
//!
//! A delayed edge goes from frame i to frame i + 1, so a cycle of the window lies in one
//! frame and uses only undelayed edges: R is valid iff the undelayed edges form an
//! acyclic graph, whatever the window's size. Then T is a longest-path count, computed
//! frame by frame in a topological order of the undelayed edges: an unknown vertex
//! becomes known one step after the last of its predecessors, so
//! T(i, v) = 1 + max T over its predecessors (0 when it has none).

use super::{Pattern, RolloutError, RolloutGraph, MAX_WINDOW};
use amp_diagnostics::{Code, Diagnostic};

/// A cycle of undelayed edges (indices into [`RolloutGraph::edges`]), in order around
/// it, starting with its edge declared first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub edges: Vec<usize>,
}

impl Cycle {
    pub(super) fn to_diagnostic(&self, graph: &RolloutGraph) -> Diagnostic {
        let mut names: Vec<&str> =
            self.edges.iter().map(|&e| graph.nodes[graph.edges[e].source].name.as_str()).collect();
        if let Some(&first) = names.first() {
            names.push(first);
        }
        let path = names.join(" -> ");
        let Some((&first, rest)) = self.edges.split_first() else {
            return Diagnostic::new(Code::InvalidRollout, graph.span, "the rollout pattern is not valid");
        };
        let mut diagnostic = Diagnostic::new(
            Code::InvalidRollout,
            graph.edges[first].span,
            format!("the rollout pattern of `{}` is not valid: {path} has no delay", graph.name),
        )
        .with_primary(format!("`{}` undelayed", graph.edge_name(first)));
        for &e in rest {
            diagnostic = diagnostic.with_label(graph.edges[e].span, format!("`{}` undelayed", graph.edge_name(e)));
        }
        diagnostic
            .with_note("a frame's value would depend on itself: the rollout window has a cycle")
            .with_help(format!("delay one of these edges, e.g. `--pattern {}=1`", graph.edge_name(first)))
    }
}

/// T(i, v) for the frames 0..=W of one window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tableau {
    /// W: the frames are 0..=W.
    pub window: usize,
    /// Node-major: node v's row holds T(0, v), ..., T(W, v).
    steps: Vec<usize>,
}

impl Tableau {
    /// T(frame, node); 0 outside the tableau.
    pub fn step(&self, node: usize, frame: usize) -> usize {
        self.row(node).get(frame).copied().unwrap_or(0)
    }

    /// T(0, node), ..., T(W, node).
    pub fn row(&self, node: usize) -> &[usize] {
        let frames = self.window + 1;
        self.steps.get(node * frames..(node + 1) * frames).unwrap_or(&[])
    }
}

/// What one valid pattern gives: the tableau of the asked window and F(R).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analysis {
    pub tableau: Tableau,
    pub inference_factor: usize,
}

/// Checks `pattern` and computes its tableau over frames 0..=`window` and its inference
/// factor. An invalid pattern is [`RolloutError::Invalid`] with one cycle.
pub fn analyse(graph: &RolloutGraph, pattern: &Pattern, window: usize) -> Result<Analysis, RolloutError> {
    if window > MAX_WINDOW {
        return Err(RolloutError::WindowTooLarge { window, limit: MAX_WINDOW });
    }
    let order = undelayed_order(graph, pattern).map_err(RolloutError::Invalid)?;
    let tableau = tableau_in_order(graph, pattern, &order, window);
    // Frame 1 of a larger window is frame 1 of the window of size 1: a frame's steps
    // depend only on earlier frames and its own.
    let frame_one = if window >= 1 { tableau.clone() } else { tableau_in_order(graph, pattern, &order, 1) };
    let inference_factor = (0..graph.nodes.len()).map(|v| frame_one.step(v, 1)).max().unwrap_or(0);
    Ok(Analysis { tableau, inference_factor })
}

/// F(R) alone; [`RolloutError::Invalid`] for an invalid pattern.
pub fn inference_factor(graph: &RolloutGraph, pattern: &Pattern) -> Result<usize, RolloutError> {
    analyse(graph, pattern, 1).map(|a| a.inference_factor)
}

/// The order in which one frame's nodes can be computed under `pattern`: every node
/// after the sources it reads undelayed (inputs included). [`RolloutError::Invalid`] for
/// an invalid pattern. The lowering and the reference evaluator walk a frame in it.
pub fn frame_order(graph: &RolloutGraph, pattern: &Pattern) -> Result<Vec<usize>, RolloutError> {
    undelayed_order(graph, pattern).map_err(RolloutError::Invalid)
}

/// The nodes in a topological order of the undelayed edges (Kahn's algorithm), or a
/// cycle of them.
fn undelayed_order(graph: &RolloutGraph, pattern: &Pattern) -> Result<Vec<usize>, Cycle> {
    let n = graph.nodes.len();
    let mut indegree = vec![0usize; n];
    let mut outgoing: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in graph.edges.iter().enumerate() {
        if pattern.delay(i) == 0 {
            indegree[e.target] += 1;
            outgoing[e.source].push(e.target);
        }
    }
    let mut order: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
    let mut next = 0;
    while let Some(&v) = order.get(next) {
        next += 1;
        for &w in &outgoing[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                order.push(w);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    Err(find_cycle(graph, pattern, &indegree))
}

/// A cycle among the nodes Kahn's algorithm left (`remaining[v] > 0`). Each of them has
/// an undelayed edge from another one left, so walking such edges backwards from any of
/// them must come back to a node already seen.
fn find_cycle(graph: &RolloutGraph, pattern: &Pattern, remaining: &[usize]) -> Cycle {
    let left = |v: usize| remaining.get(v).is_some_and(|&r| r > 0);
    // Each node's first undelayed edge from a node left, found in one pass.
    let mut incoming: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    for (i, e) in graph.edges.iter().enumerate() {
        if pattern.delay(i) == 0 && left(e.source) && left(e.target) && incoming[e.target].is_none() {
            incoming[e.target] = Some(i);
        }
    }
    let Some(start) = (0..graph.nodes.len()).find(|&v| left(v)) else {
        return Cycle { edges: Vec::new() };
    };
    // seen[v]: the position in `walk` at which v was reached.
    let mut seen: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    let mut walk: Vec<usize> = Vec::new();
    let mut v = start;
    while seen[v].is_none() {
        seen[v] = Some(walk.len());
        let Some(edge) = incoming[v] else {
            return Cycle { edges: Vec::new() };
        };
        walk.push(edge);
        v = graph.edges[edge].source;
    }
    let from = seen[v].unwrap_or(0);
    // The walk went against the edges: reverse it, then start at the first declared.
    let mut edges: Vec<usize> = walk[from..].iter().rev().copied().collect();
    if let Some(first) = edges.iter().enumerate().min_by_key(|(_, &e)| e).map(|(i, _)| i) {
        edges.rotate_left(first);
    }
    Cycle { edges }
}

fn tableau_in_order(graph: &RolloutGraph, pattern: &Pattern, order: &[usize], window: usize) -> Tableau {
    let frames = window + 1;
    let n = graph.nodes.len();
    let mut incoming: Vec<Vec<(usize, u8)>> = vec![Vec::new(); n];
    for (i, e) in graph.edges.iter().enumerate() {
        incoming[e.target].push((e.source, pattern.delay(i)));
    }
    let mut steps = vec![0usize; n * frames];
    for frame in 1..frames {
        for &v in order {
            if graph.nodes[v].is_input {
                continue;
            }
            // Predecessors before frame 0 are outside the window.
            let latest = incoming[v]
                .iter()
                .filter_map(|&(u, delay)| frame.checked_sub(usize::from(delay)).map(|i| steps[u * frames + i]))
                .max()
                .unwrap_or(0);
            steps[v * frames + frame] = latest.saturating_add(1);
        }
    }
    Tableau { window, steps }
}
