//! The verifier: every invariant the runtime relies on, checked before a graph runs.
//!
//! In: a [`Graph`], possibly read from a hostile file. Out: the graph as [`Verified`], or
//! every broken invariant as a [`VerifyError`] naming the node (index, label, op), what is
//! wrong and, for type and shape errors, both types. The planner, the JIT and the
//! executor take only a [`Verified`] graph, so a graph is verified once per load and
//! nothing runs one that failed.
//!
//! The checks, by module:
//! - here: the state schema (field 0 is the instance; names are unique identifiers; at
//!   most 65535 fields), unique parameter names, exactly one `source` and at least one
//!   `loss` or `sink`;
//! - `structure`: ports (every edge's ports exist, every input port has exactly one
//!   edge whose payload type is the port's), self loops, and the adjacency the later
//!   checks walk;
//! - `ops`: each op's arity, port types and parameter shapes (`docs/IR.md`'s table);
//!   every field id in range; `reads`/`writes` list what the op's attributes read and
//!   write; every node that keeps something under its key has the instance in it;
//! - `loops`: every cycle has a header `phi`, an exit `cond`/`switch` and an `isu`
//!   step, and a node inside a loop has the loop's counter (and those of the loops
//!   around it) in its key;
//! - `limits`: every tensor within `crate::limits::MAX_TENSOR_ELEMENTS`, the parameters
//!   within their count and total, every state expression at most
//!   `crate::limits::MAX_EXPR_DEPTH` deep;
//! - `flow`: every node is reachable from the source and reaches a loss or sink (one that
//!   reaches only sinks is a forward-only prediction), and every field a node reads is written on every
//!   path from the source to it.
//!
//! The verifier never panics (it indexes only where the bound was checked first, and
//! never recurses over input-sized structures: expressions are walked with an explicit
//! stack, components found with petgraph's iterative Kosaraju) and runs in time linear in the graph's size, plus the dataflow fixpoint
//! over the state fields (one pass per 64 fields that some node reads) and one pass per
//! level of loop nesting (at most [`MAX_LOOP_DEPTH`]).

mod error;
mod flow;
mod limits;
mod loops;
mod ops;
mod structure;

pub use error::{
    Arity, FieldRef, FieldUse, KeyReason, LoopPart, NodeRef, ParamExpectation, PortDir, TypeExpectation, VerifyError,
    VerifyErrorKind,
};
pub use loops::MAX_LOOP_DEPTH;
pub use ops::key_reason;

use crate::{ConstValue, DataStep, FieldId, FieldRole, Graph, LossKind, Node, Op};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::NodeIndexable;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::ops::Deref;

/// A graph the verifier accepted, owned (`Verified`, what a loader keeps) or borrowed
/// (`Verified<&Graph>`). Only [`verify`] and [`Verified::new`] make one, and it gives
/// out its graph only to read, so what it holds stays a graph that passed.
#[derive(Clone, Debug)]
pub struct Verified<G: Borrow<Graph> = Graph> {
    graph: G,
}

impl<G: Borrow<Graph>> Verified<G> {
    pub fn graph(&self) -> &Graph {
        self.graph.borrow()
    }

    /// The graph, to change it (it must be verified again to run).
    pub fn into_inner(self) -> G {
        self.graph
    }
}

impl Verified {
    /// [`verify`] for an owned graph that gives the graph back with the errors when it
    /// fails (to report them at its nodes' sources).
    pub fn new(graph: Graph) -> Result<Verified, Box<Rejected>> {
        match check(&graph) {
            Ok(()) => Ok(Verified { graph }),
            Err(errors) => Err(Box::new(Rejected { graph, errors })),
        }
    }
}

impl<G: Borrow<Graph>> Deref for Verified<G> {
    type Target = Graph;

    fn deref(&self) -> &Graph {
        self.graph.borrow()
    }
}

/// A graph the verifier refused, and why.
#[derive(Clone, Debug)]
pub struct Rejected {
    pub graph: Graph,
    pub errors: Vec<VerifyError>,
}

/// Checks every invariant the runtime relies on (see the module documentation) and
/// returns the graph as [`Verified`]: pass it by value to keep it, by reference to ask.
pub fn verify<G: Borrow<Graph>>(graph: G) -> Result<Verified<G>, Vec<VerifyError>> {
    check(graph.borrow())?;
    Ok(Verified { graph })
}

fn check(graph: &Graph) -> Result<(), Vec<VerifyError>> {
    let mut cx = Checker::new(graph);
    check_state(&mut cx);
    check_params(&mut cx);
    limits::check_param_sizes(&mut cx);
    let source = check_ends(&mut cx);
    let adjacency = structure::check_ports(&mut cx);
    ops::check_nodes(&mut cx, &adjacency);
    limits::check_node_sizes(&mut cx);
    loops::check_loops(&mut cx, &adjacency);
    flow::check_reachability(&mut cx, &adjacency, source);
    if let Some(source) = source {
        flow::check_defined_before_use(&mut cx, &adjacency, source);
    }
    cx.finish()
}

/// The verifier's verdict as text: `ok`, or one error per line.
pub fn verify_report(graph: &Graph) -> String {
    match check(graph) {
        Ok(()) => "ok\n".to_string(),
        Err(errors) => errors.iter().map(|e| format!("error: {e}\n")).collect(),
    }
}

/// The graph under check, its nodes by dense index, and the errors found so far.
pub(crate) struct Checker<'g> {
    graph: &'g Graph,
    /// Nodes by `NodeIndex::index()`; `None` for the stable graph's vacant slots.
    nodes: Vec<Option<&'g Node>>,
    /// Parameters by name (the first of a duplicated name), for the ops' shape checks.
    params: HashMap<&'g str, &'g crate::Param>,
    errors: Vec<VerifyError>,
}

impl<'g> Checker<'g> {
    fn new(graph: &'g Graph) -> Self {
        let nodes = (0..graph.nodes.node_bound()).map(|i| graph.nodes.node_weight(NodeIndex::new(i))).collect();
        let mut params = HashMap::new();
        for p in &graph.params {
            params.entry(p.name.as_str()).or_insert(p);
        }
        Checker { graph, nodes, params, errors: Vec::new() }
    }

    /// One past the largest node index.
    fn bound(&self) -> usize {
        self.nodes.len()
    }

    fn node(&self, i: usize) -> Option<&'g Node> {
        self.nodes.get(i).copied().flatten()
    }

    /// The indices of the nodes that exist, ascending.
    fn node_indices(&self) -> impl Iterator<Item = (usize, &'g Node)> + '_ {
        self.nodes.iter().enumerate().filter_map(|(i, n)| n.map(|n| (i, n)))
    }

    fn param(&self, name: &str) -> Option<&'g crate::Param> {
        self.params.get(name).copied()
    }

    fn field_count(&self) -> usize {
        self.graph.state.len()
    }

    fn field_ref(&self, id: FieldId) -> FieldRef {
        FieldRef { id, name: self.graph.field(id).map(|f| f.name.clone()) }
    }

    fn node_ref(&self, i: usize) -> NodeRef {
        let index = NodeIndex::new(i);
        match self.node(i) {
            Some(node) => NodeRef { index, label: node.label.clone(), op: self.describe_op(&node.op) },
            None => NodeRef { index, label: String::new(), op: "vacant".to_string() },
        }
    }

    /// The op keyword with the attribute that tells nodes apart in an error message.
    fn describe_op(&self, op: &Op) -> String {
        let keyword = op.keyword();
        match op {
            Op::Read { path } => {
                let mut text = String::from("read ");
                for (i, step) in path.iter().enumerate() {
                    if i == 8 {
                        text.push('…');
                        break;
                    }
                    match step {
                        DataStep::Field(name) => {
                            text.push('.');
                            text.push_str(name);
                        }
                        DataStep::Index(_) => text.push_str("[..]"),
                        DataStep::Variant(k) => text.push_str(&format!("{{{k}}}")),
                    }
                }
                text
            }
            Op::Const { value } => match value {
                ConstValue::Zeros => "const zeros".to_string(),
                ConstValue::Ones => "const ones".to_string(),
                ConstValue::Scalar(v) => format!("const {v}"),
            },
            Op::Linear { param } | Op::Embedding { param, .. } | Op::Affine { param } => format!("{keyword} @{param}"),
            Op::EmbeddingRows { param, field, .. } => format!("{keyword} @{param} {}", self.field_ref(*field)),
            Op::Unary(f) => format!("unary {}", f.name()),
            Op::Binary(f) => format!("binary {}", f.name()),
            Op::Split { parts } => format!("split {parts}"),
            Op::Switch { arms, .. } => format!("switch {arms}"),
            Op::Phi { arms } => format!("phi {arms}"),
            Op::Isu { field, .. } => format!("isu {}", self.field_ref(*field)),
            Op::Loss(LossKind::CrossEntropy { .. } | LossKind::CrossEntropyMean { .. }) => {
                "loss cross_entropy".to_string()
            }
            Op::Loss(LossKind::Mse) => "loss mse".to_string(),
            Op::Loss(LossKind::Term { .. }) => "loss term".to_string(),
            Op::Sink { name } => format!("sink {name:?}"),
            Op::Flatmap { field, .. } | Op::Group { field, .. } | Op::Ungroup { field } => {
                format!("{keyword} {}", self.field_ref(*field))
            }
            Op::StateFromPayload { field, .. } => format!("{keyword} {}", self.field_ref(*field)),
            Op::Reduce(_) | Op::TopK { .. } | Op::Gather { .. } | Op::ScatterSum { .. } => keyword.to_string(),
            Op::GatherRows { field, .. } | Op::MaskRows { field, .. } => {
                format!("{keyword} {}", self.field_ref(*field))
            }
            Op::PartitionRows { field, arms, .. } | Op::MergeRows { field, arms, .. } => {
                format!("{keyword} {} {arms}", self.field_ref(*field))
            }
            Op::Source | Op::Concat | Op::Forget | Op::Cond { .. } | Op::Dropout { .. } => keyword.to_string(),
        }
    }

    fn report(&mut self, node: usize, kind: VerifyErrorKind) {
        let node = Some(self.node_ref(node));
        self.errors.push(VerifyError { node, kind });
    }

    fn report_graph(&mut self, kind: VerifyErrorKind) {
        self.errors.push(VerifyError { node: None, kind });
    }

    /// Graph-wide errors first, then by node, each node's in the order found.
    fn finish(mut self) -> Result<(), Vec<VerifyError>> {
        if self.errors.is_empty() {
            return Ok(());
        }
        self.errors.sort_by_key(|e| e.node.as_ref().map(|n| n.index.index()));
        Err(self.errors)
    }
}

/// Field 0 is the instance; names are unique identifiers; at most 65535 fields.
fn check_state(cx: &mut Checker) {
    let state = &cx.graph.state;
    match state.first() {
        None => cx.report_graph(VerifyErrorKind::EmptyState),
        Some(first) if first.role != FieldRole::Instance => {
            let kind = VerifyErrorKind::FirstFieldNotInstance { name: first.name.clone(), role: first.role };
            cx.report_graph(kind);
        }
        Some(_) => {}
    }
    if state.len() > usize::from(u16::MAX) {
        cx.report_graph(VerifyErrorKind::TooManyFields { count: state.len() });
    }
    let mut seen: HashMap<&str, u16> = HashMap::new();
    // Fields past 65535 cannot be named by a `FieldId`; TooManyFields covers them.
    for (i, field) in state.iter().enumerate().take(usize::from(u16::MAX)) {
        let id = i as u16;
        if !is_identifier(&field.name) {
            cx.report_graph(VerifyErrorKind::FieldNameNotIdentifier { field: id, name: field.name.clone() });
        }
        if let Some(&first) = seen.get(field.name.as_str()) {
            let kind = VerifyErrorKind::DuplicateFieldName { name: field.name.clone(), first, second: id };
            cx.report_graph(kind);
        } else {
            seen.insert(&field.name, id);
        }
    }
}

/// Parameter names are unique: `Graph::param` finds the first, so a second would be dead
/// weight with an ambiguous name.
fn check_params(cx: &mut Checker) {
    let mut seen: HashMap<&str, ()> = HashMap::new();
    for param in &cx.graph.params {
        if seen.insert(&param.name, ()).is_some() {
            cx.report_graph(VerifyErrorKind::DuplicateParam { name: param.name.clone() });
        }
    }
}

/// Exactly one `source`; at least one `loss` or `sink`. Returns the source.
fn check_ends(cx: &mut Checker) -> Option<usize> {
    let mut first_source = None;
    let mut extra_sources = Vec::new();
    let mut has_end = false;
    for (i, node) in cx.node_indices() {
        match node.op {
            Op::Source if first_source.is_none() => first_source = Some(i),
            Op::Source => extra_sources.push(i),
            Op::Loss(_) | Op::Sink { .. } => has_end = true,
            _ => {}
        }
    }
    match first_source {
        None => cx.report_graph(VerifyErrorKind::NoSource),
        Some(first) => {
            for extra in extra_sources {
                cx.report(extra, VerifyErrorKind::ExtraSource { first: NodeIndex::new(first) });
            }
        }
    }
    if !has_end {
        cx.report_graph(VerifyErrorKind::NoLossOrSink);
    }
    first_source
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
