//! Rollout analysis of `network` blocks (SPEC §6), after Fischer, Köhler and Pfeil, "The
//! streaming rollout of deep networks".
//!
//! In: a checked [`NetworkDef`]. Out: its edges ([`RolloutGraph`]), rollout patterns
//! ([`Pattern`]: the streaming and sequential ones, or the sequential one with edges
//! overridden), whether a pattern is valid, its inference tableau and inference factor
//! ([`analyse`]), and every valid pattern of a small network ([`enumerate_valid`]).
//! Failures are [`RolloutError`]s, each turned into a coded [`Diagnostic`]. Pure, and
//! bounded on any input: windows of at most [`MAX_WINDOW`] frames, enumeration of at
//! most [`MAX_ENUMERATED_EDGES`] edges; every walk is iterative.
//!
//! Definitions (docs/rollouts.md): a pattern R gives each edge (u, v) a delay 0 or 1.
//! The window of size W has the vertices (i, v) for frames i = 0..W and the edges
//! ((i, u), (i + R(u, v), v)); R is valid iff the window is acyclic. (i, v) is known at
//! first iff v is an input or i = 0; an update step makes known every unknown vertex
//! whose predecessors were all known before it. T(i, v) is the step after which (i, v)
//! is known; F(R) is the largest T over frame 1 of the window of size 1.

mod enumerate;
mod json;
mod tableau;

pub use enumerate::{enumerate_valid, Enumerated};
pub use json::{analysis_json, enumeration_json, pattern_json};
pub use tableau::{analyse, frame_order, inference_factor, Analysis, Cycle, Tableau};

use crate::typed::NetworkDef;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::NetStmtKind;

/// The largest window `analyse` computes a tableau for: the tableau is nodes × (W + 1).
pub const MAX_WINDOW: usize = 64;

/// The most edges whose patterns `enumerate_valid` lists: up to 2^16 patterns, each a
/// line of output.
pub const MAX_ENUMERATED_EDGES: usize = 16;

/// A network as the rollout sees it: nodes (inputs included) and the edges between them.
#[derive(Clone, Debug)]
pub struct RolloutGraph {
    pub name: String,
    /// The network's name where it is declared.
    pub span: Span,
    pub nodes: Vec<RolloutNode>,
    /// In declaration order: by target node, then by position in its `from` clause.
    pub edges: Vec<Edge>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutNode {
    pub name: String,
    pub is_input: bool,
}

/// An edge `source -> target`: `target` reads `source`'s value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub source: usize,
    pub target: usize,
    /// Where the source is named in the target's `from` clause.
    pub span: Span,
}

impl RolloutGraph {
    /// The graph of a checked network. A source named twice in one `from` clause is one
    /// edge: a pattern delays an edge, not one read of it.
    pub fn of_network(def: &NetworkDef) -> RolloutGraph {
        let nodes = def
            .nodes
            .iter()
            .map(|n| RolloutNode { name: n.name.clone(), is_input: n.kind == NetStmtKind::Input })
            .collect();
        let mut edges: Vec<Edge> = Vec::new();
        for (target, node) in def.nodes.iter().enumerate() {
            let first = edges.len();
            for (i, &source) in node.sources.iter().enumerate() {
                if edges[first..].iter().any(|e| e.source == source) {
                    continue;
                }
                let span = node.source_spans.get(i).copied().unwrap_or(node.span);
                edges.push(Edge { source, target, span });
            }
        }
        RolloutGraph { name: def.name.clone(), span: def.span, nodes, edges }
    }

    /// `u->v`, as patterns and output name an edge.
    pub fn edge_name(&self, edge: usize) -> String {
        let e = self.edges[edge];
        format!("{}->{}", self.nodes[e.source].name, self.nodes[e.target].name)
    }

    /// A recurrent edge reads the node itself or a node declared after it: the
    /// sequential rollout delays exactly these.
    pub fn is_recurrent(&self, edge: usize) -> bool {
        let e = self.edges[edge];
        e.source >= e.target
    }

    /// The edge `source -> target`, if the network has it.
    pub fn edge_between(&self, source: usize, target: usize) -> Option<usize> {
        self.edges.iter().position(|e| e.source == source && e.target == target)
    }

    fn edge_names(&self) -> Vec<String> {
        (0..self.edges.len()).map(|e| self.edge_name(e)).collect()
    }
}

/// A rollout pattern: the delay (0 or 1) of each edge of one [`RolloutGraph`], by index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    delays: Vec<u8>,
}

impl Pattern {
    /// Every edge delayed: every node of a frame reads only the previous frame.
    pub fn streaming(graph: &RolloutGraph) -> Pattern {
        Pattern { delays: vec![1; graph.edges.len()] }
    }

    /// Only the recurrent edges delayed, as a network is usually run frame by frame.
    pub fn sequential(graph: &RolloutGraph) -> Pattern {
        Pattern { delays: (0..graph.edges.len()).map(|e| u8::from(graph.is_recurrent(e))).collect() }
    }

    /// The pattern whose delays are `delays`, one per edge (each 0 or 1, anything else
    /// read as 1); `None` when the count is not the graph's.
    pub fn from_delays(graph: &RolloutGraph, delays: &[u8]) -> Option<Pattern> {
        (delays.len() == graph.edges.len()).then(|| Pattern { delays: delays.iter().map(|&d| d.min(1)).collect() })
    }

    /// The sequential pattern with the edges of `text` overridden: `a->b=1,b->b=0`
    /// (names as declared, spaces allowed around each part).
    pub fn with_overrides(graph: &RolloutGraph, text: &str) -> Result<Pattern, RolloutError> {
        let mut pattern = Pattern::sequential(graph);
        let mut given: Vec<usize> = Vec::new();
        for item in text.split(',') {
            let syntax = || RolloutError::PatternSyntax { item: item.trim().to_string() };
            let (edge, delay) = item.split_once('=').ok_or_else(syntax)?;
            let (source, target) = edge.split_once("->").ok_or_else(syntax)?;
            let delay = match delay.trim() {
                "0" => 0,
                "1" => 1,
                _ => return Err(syntax()),
            };
            let (source, target) = (source.trim(), target.trim());
            let found = graph
                .edges
                .iter()
                .position(|e| graph.nodes[e.source].name == source && graph.nodes[e.target].name == target);
            let Some(index) = found else {
                return Err(RolloutError::UnknownEdge {
                    edge: format!("{source}->{target}"),
                    edges: graph.edge_names(),
                });
            };
            if given.contains(&index) {
                return Err(RolloutError::RepeatedEdge { edge: graph.edge_name(index) });
            }
            given.push(index);
            pattern.delays[index] = delay;
        }
        Ok(pattern)
    }

    /// The pattern a command line names: `streaming`, `sequential`, or the sequential
    /// pattern with edges overridden (`a->b=1,b->b=0`, [`Pattern::with_overrides`]).
    pub fn named(graph: &RolloutGraph, text: &str) -> Result<Pattern, RolloutError> {
        match text.trim() {
            "streaming" => Ok(Pattern::streaming(graph)),
            "sequential" => Ok(Pattern::sequential(graph)),
            edges => Pattern::with_overrides(graph, edges),
        }
    }

    pub fn delay(&self, edge: usize) -> u8 {
        self.delays.get(edge).copied().unwrap_or(1)
    }

    pub fn delays(&self) -> &[u8] {
        &self.delays
    }
}

/// Why a rollout cannot be analysed as asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutError {
    /// The window has a cycle: these edges, all undelayed, in order around it.
    Invalid(Cycle),
    /// An item of an edge list that is not `u->v=0` or `u->v=1`.
    PatternSyntax { item: String },
    /// An edge list names an edge the network does not have.
    UnknownEdge { edge: String, edges: Vec<String> },
    /// An edge list gives one edge twice.
    RepeatedEdge { edge: String },
    /// Too many edges to list every pattern.
    TooManyEdges { edges: usize, limit: usize },
    /// A window past [`MAX_WINDOW`].
    WindowTooLarge { window: usize, limit: usize },
}

impl RolloutError {
    /// The coded diagnostic for `graph`. Errors about the command line's pattern point at
    /// the network's name, since the pattern has no place in the source.
    pub fn to_diagnostic(&self, graph: &RolloutGraph) -> Diagnostic {
        let name = &graph.name;
        match self {
            RolloutError::Invalid(cycle) => cycle.to_diagnostic(graph),
            RolloutError::PatternSyntax { item } => {
                Diagnostic::new(Code::BadRolloutPattern, graph.span, format!("`{item}` is not an edge with a delay"))
                    .with_primary(format!("in the pattern given for `{name}`"))
                    .with_help("write each edge as `source->target=0` or `source->target=1`, separated by commas")
            }
            RolloutError::UnknownEdge { edge, edges } => {
                let listed = if edges.is_empty() { "none".to_string() } else { edges.join(", ") };
                Diagnostic::new(Code::BadRolloutPattern, graph.span, format!("`{name}` has no edge `{edge}`"))
                    .with_primary("the pattern names an edge of this network")
                    .with_note(format!("the edges of `{name}` are: {listed}"))
            }
            RolloutError::RepeatedEdge { edge } => {
                Diagnostic::new(Code::BadRolloutPattern, graph.span, format!("the pattern gives `{edge}` twice"))
                    .with_primary(format!("in the pattern given for `{name}`"))
                    .with_help("give each edge's delay once")
            }
            RolloutError::TooManyEdges { edges, limit } => Diagnostic::new(
                Code::RolloutTooLarge,
                graph.span,
                format!("`{name}` has {edges} edges, too many to enumerate its rollout patterns (at most {limit})"),
            )
            .with_primary(format!("2^{edges} patterns"))
            .with_help("analyse single patterns with `--pattern` instead"),
            RolloutError::WindowTooLarge { window, limit } => Diagnostic::new(
                Code::RolloutTooLarge,
                graph.span,
                format!("a rollout window of size {window} is too large (at most {limit})"),
            )
            .with_primary(format!("the tableau of `{name}`")),
        }
    }
}
