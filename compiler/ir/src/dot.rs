//! Graphviz output: `to_dot(graph)` gives a `digraph` to render with `dot -Tsvg`.
//!
//! In: a [`Graph`]. Out: DOT text. Depends on the graph types and the text form's op
//! printer (labels show the same attributes as the text form). Node kinds are told apart
//! by shape: parameterized transforms (Ppt) are filled boxes, other payload transforms
//! (Nppt) ellipses, `cond`/`switch` diamonds, `phi` inverted triangles, `isu` hexagons,
//! `source`/`sink`/`loss` double octagons, `read`/`const` notes. Edges carry
//! `from→to` port labels when either end has several ports; back edges of loops (found by
//! a depth-first walk from the sources) are dashed, red, and do not constrain the ranking,
//! so loops draw as a forward chain with a visible return edge.

use crate::text::op_attributes;
use crate::{Graph, Node, Op, PayloadTy};
use petgraph::stable_graph::{EdgeIndex, NodeIndex};
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use petgraph::Direction;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// Renders the graph as Graphviz DOT.
pub fn to_dot(graph: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", escape(&graph.name));
    out.push_str("  node [fontname=\"monospace\", fontsize=10];\n");
    out.push_str("  edge [fontname=\"monospace\", fontsize=9];\n");
    for index in graph.nodes.node_indices() {
        let Some(node) = graph.nodes.node_weight(index) else { continue };
        let _ = writeln!(
            out,
            "  n{} [{}, label=\"{}\"];",
            index.index(),
            node_style(&node.op),
            escape_lines(&node_label(graph, index, node))
        );
    }
    let back = back_edges(graph);
    let mut edges: Vec<_> = graph.nodes.edge_references().collect();
    edges.sort_by_key(|e| (e.source(), e.target(), e.weight().from_port, e.weight().to_port));
    for edge in edges {
        let (src, dst, weight) = (edge.source(), edge.target(), edge.weight());
        let many_ports = |index: NodeIndex, output: bool| {
            graph.nodes.node_weight(index).is_some_and(|n| if output { n.outputs.len() } else { n.inputs.len() } > 1)
        };
        let mut attrs = Vec::new();
        if many_ports(src, true) || many_ports(dst, false) {
            attrs.push(format!("label=\"{}→{}\"", weight.from_port, weight.to_port));
        }
        if back.contains(&edge.id()) {
            attrs.push("style=dashed, color=red, constraint=false".to_string());
        }
        let attrs = if attrs.is_empty() { String::new() } else { format!(" [{}]", attrs.join(", ")) };
        let _ = writeln!(out, "  n{} -> n{}{attrs};", src.index(), dst.index());
    }
    out.push_str("}\n");
    out
}

fn node_style(op: &Op) -> &'static str {
    match op {
        Op::Linear { .. } | Op::Embedding { .. } | Op::EmbeddingRows { .. } | Op::Affine { .. } => {
            "shape=box, style=filled, fillcolor=\"#cfe2ff\""
        }
        Op::Unary(_) | Op::Binary(_) | Op::Concat | Op::Split { .. } | Op::Forget | Op::Dropout { .. } => {
            "shape=ellipse"
        }
        Op::Cond { .. } | Op::Switch { .. } => "shape=diamond, style=filled, fillcolor=\"#fff3cd\"",
        Op::Phi { .. } => "shape=invtriangle, style=filled, fillcolor=\"#fff3cd\"",
        Op::Isu { .. } => "shape=hexagon, style=filled, fillcolor=\"#e2d9f3\"",
        Op::Source | Op::Sink { .. } | Op::Loss(_) => "shape=doubleoctagon",
        Op::Read { .. } | Op::Const { .. } => "shape=note",
        Op::Flatmap { .. } | Op::Ungroup { .. } => "shape=trapezium, style=filled, fillcolor=\"#d1e7dd\"",
        Op::Group { .. } | Op::Reduce(_) | Op::ScatterSum { .. } => {
            "shape=invtrapezium, style=filled, fillcolor=\"#d1e7dd\""
        }
        Op::Gather { .. }
        | Op::TopK { .. }
        | Op::GatherRows { .. }
        | Op::MaskRows { .. }
        | Op::PartitionRows { .. }
        | Op::MergeRows { .. } => "shape=ellipse, style=dashed",
        Op::StateFromPayload { .. } => "shape=hexagon, style=\"filled,dashed\", fillcolor=\"#e2d9f3\"",
    }
}

/// `%N op attrs`, the node's label when it has one, its output types, its fusion group.
fn node_label(graph: &Graph, index: NodeIndex, node: &Node) -> Vec<String> {
    let attrs = op_attributes(graph, &node.op);
    let mut lines = vec![format!("%{} {} {attrs}", index.index(), node.op.keyword()).trim_end().to_string()];
    if !node.label.is_empty() {
        lines.push(node.label.clone());
    }
    let outputs: Vec<String> = node.outputs.iter().map(PayloadTy::to_string).collect();
    lines.push(format!("-> {}", if outputs.is_empty() { "()".to_string() } else { outputs.join(", ") }));
    if let Some(group) = node.fusion {
        lines.push(format!("fusion {group}"));
    }
    lines
}

/// Edges that close a cycle in a depth-first walk started from the sources (nodes without
/// inputs) in index order, then from any node not reached yet. Iterative, so that long
/// chains cannot overflow the stack.
fn back_edges(graph: &Graph) -> HashSet<EdgeIndex> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    let mut marks: HashMap<NodeIndex, Mark> = HashMap::new();
    let mut back = HashSet::new();
    let is_root = |n: &NodeIndex| graph.nodes.edges_directed(*n, Direction::Incoming).next().is_none();
    let roots = graph.nodes.node_indices().filter(is_root).chain(graph.nodes.node_indices());
    let successors = |n: NodeIndex| {
        let mut out: Vec<(EdgeIndex, NodeIndex, u16)> = graph
            .nodes
            .edges_directed(n, Direction::Outgoing)
            .map(|e| (e.id(), e.target(), e.weight().from_port))
            .collect();
        // Deterministic walk order whatever order the edges were added in.
        out.sort_by_key(|(_, target, port)| (*port, *target));
        out
    };
    for root in roots {
        if marks.contains_key(&root) {
            continue;
        }
        marks.insert(root, Mark::OnPath);
        let mut stack = vec![(root, successors(root), 0usize)];
        while let Some((node, next, cursor)) = stack.last_mut() {
            let Some(&(edge, target, _)) = next.get(*cursor) else {
                marks.insert(*node, Mark::Done);
                stack.pop();
                continue;
            };
            *cursor += 1;
            match marks.get(&target) {
                Some(Mark::OnPath) => {
                    back.insert(edge);
                }
                Some(Mark::Done) => {}
                None => {
                    marks.insert(target, Mark::OnPath);
                    stack.push((target, successors(target), 0));
                }
            }
        }
    }
    back
}

fn escape_lines(lines: &[String]) -> String {
    let escaped: Vec<String> = lines.iter().map(|l| escape(l)).collect();
    escaped.join("\\n")
}

/// Escapes text for a DOT double-quoted string: quotes and backslashes (so a `\n` in a
/// label shows as typed instead of becoming a Graphviz line break) and raw line breaks.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}
