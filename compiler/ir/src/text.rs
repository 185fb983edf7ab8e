//! The stable text form of a graph: MLIR-like, one line per node, with source locations.
//!
//! In: a [`Graph`] (print) or text (parse). Out: text, or a graph; a [`ParseError`] with a
//! 1-based line and column when the text is not a graph. Depends on the graph types, and on
//! `ampg` for the shared limits and the builder that recreates holes. Invariants:
//! `print(&parse(&print(g))?) == print(g)` and `parse(&print(g))` equals `g` node for node
//! (indices and holes included) for every graph whose edges fit its ports; `parse` never
//! panics, whatever the input (files are untrusted).
//!
//! ```text
//! amp.graph @ListReduce {
//!   file 0 "examples/list_reduce.amp"
//!   meta "hidden" = "128"
//!   state %inst: instance, %t0: counter
//!   param embed.weight: f32[14, 128] normal
//!   %0 = source() -> unit "x" loc(0:130..137 @13:5)
//!   %3 = phi 2 (%2#0: f32[128], %10#0: f32[128]) -> f32[128] key(%inst, %t0) "h"
//!   %4 = cond [%t0 < len($.tokens)] (%3#0: f32[128]) -> f32[128], f32[128] reads(%t0) ""
//!   %5 = embedding @embed[$.tokens[%t0]] (%6#0: unit) -> f32[128] key(%inst, %t0) "embed"
//!   %8 = linear @cell (%7#0: f32[256]) -> f32[128] key(%inst, %t0) "cell" loc(0:150..157 @15:5)
//!   %10 = isu %t0 := %t0 + 1 inverse %t0 - 1 (%9#0: f32[128]) -> f32[128] writes(%t0) ""
//!   %12 = sink "h" (%11#0: f32[128]) -> () ""
//! }
//! ```
//!
//! Layout, in this order (blank lines and whole-line `//` comments are ignored anywhere):
//! - `amp.graph @NAME {` and, last, `}`; nothing but blank lines and comments may follow.
//! - `file N "path"`, one per source file, `N` counting from 0 (what `loc` refers to).
//! - `meta "key" = "value"`, in key order.
//! - `state %name: role, ...` on one line (left out when the schema is empty).
//! - the input schema: `record NAME { field: TYPE, ... }`, `enum NAME { Variant { ... }, ... }`,
//!   `input NAME` (see [`crate::schema`]).
//! - `param NAME: f32[d, ...] INIT` with INIT `uniform(FAN_IN)`, `normal`, `ones` or `zeros`.
//! - Nodes in index order: `%N = OP ATTRS (INPUTS) -> OUTPUTS [reads(..)] [writes(..)]
//!   [key(..)] "label" [fusion(G)] [loc(FILE:START..END @LINE:COL)]`. A missing index is a
//!   hole left by a removed node: parsing recreates it, so indices survive the round trip.
//!   The space before `(INPUTS)` is there only when the op has attributes.
//! - An input is `%SRC#PORT: TYPE` (the edge from output `PORT` of node `SRC`), listed in
//!   input-port order, or `_: TYPE` when nothing feeds it. Outputs are a type list, `()`
//!   when there is none. Types are `unit`, `f32` (a scalar) or `f32[d, ...]`.
//! - Names: `%field` and `@NAME` print bare when they are plain identifiers (`NAME` may also
//!   hold dots and digits, as in `layers.0.weight`) and quoted (`%"odd name"`) otherwise.
//!   Strings use `\"`, `\\`, `\n`, `\r`, `\t` and `\u{HEX}` escapes.
//!
//! Op attributes: `read PATH`; `const zeros | ones | <f32> | bits(0xHEX)` (decimals are
//! Rust's shortest round-tripping form; NaNs print their bits, so every scalar round-trips
//! bit for bit); `linear @P`; `affine @P`; `embedding @P[INDEX]`;
//! `unary NAME`, `binary NAME` (the names of [`crate::vocab`]: `unary relu`, `binary add`);
//! `split N`; `cond [PRED]`; `switch [INDEX] N`; `phi N`; `isu %f := EXPR [inverse EXPR]`;
//! `loss cross_entropy [LABEL] | mse`; `sink "name"`; `dropout RATE site S over(%f, ...)`.
//!
//! State expressions: `%field`, integers, data paths `$.field[EXPR]."quoted field"` (`$` is
//! the instance record), `len(PATH)`, `!e`, and binary operators with C precedence
//! (`||` < `&&` < comparisons < `+ -` < `* / %` < `!`), left associative, printed with the
//! fewest parentheses that parse back to the same tree.
//!
//! What the text cannot say: two edges into one input port, or an edge into an input port
//! the node does not have. Such graphs are invalid (the verifier rejects them); the printer
//! still prints them, with each unrepresentable edge as a `// ` comment after its node, so
//! those edges are lost on parsing. Nodes added to a parsed graph fill its holes from the
//! lowest index up, which is not necessarily the order the original graph would have used.

mod cursor;
mod expr;
mod parse;
mod schema_text;

pub use cursor::ParseError;
pub use expr::MAX_EXPR_DEPTH;
pub use parse::parse;

use crate::{
    ConstValue, DataStep, Edge, FieldId, Graph, LossBase, LossKind, Node, Op, PayloadInt, PayloadTy, ReduceFn,
    StateExpr,
};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use std::fmt::Write as _;

/// Prints the whole graph in the text form described in the module docs.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "amp.graph @{} {{", symbol(&graph.name));
    for (i, file) in graph.files.iter().enumerate() {
        let _ = writeln!(out, "  file {i} {}", quote(file));
    }
    for (key, value) in &graph.meta {
        let _ = writeln!(out, "  meta {} = {}", quote(key), quote(value));
    }
    if !graph.state.is_empty() {
        let fields: Vec<String> =
            graph.state.iter().map(|f| format!("%{}: {}", field_name(&f.name), f.role.as_str())).collect();
        let _ = writeln!(out, "  state {}", fields.join(", "));
    }
    if let Some(schema) = &graph.input {
        let _ = write!(out, "{schema}");
    }
    for param in &graph.params {
        let _ =
            writeln!(out, "  param {}: {} {}", symbol(&param.name), PayloadTy::F32(param.shape.clone()), param.init);
    }
    for index in graph.nodes.node_indices() {
        if let Some(node) = graph.nodes.node_weight(index) {
            print_node(graph, index, node, &mut out);
        }
    }
    out.push_str("}\n");
    out
}

fn print_node(graph: &Graph, index: NodeIndex, node: &Node, out: &mut String) {
    let attrs = op_attributes(graph, &node.op);
    let _ = write!(out, "  %{} = {}", index.index(), node.op.keyword());
    if !attrs.is_empty() {
        let _ = write!(out, " {attrs} ");
    }
    let (inputs, unrepresentable) = input_sources(graph, index, node.inputs.len());
    let inputs: Vec<String> = inputs
        .iter()
        .zip(&node.inputs)
        .map(|(source, ty)| match source {
            Some((src, port)) => format!("%{}#{port}: {ty}", src.index()),
            None => format!("_: {ty}"),
        })
        .collect();
    let _ = write!(out, "({}) -> ", inputs.join(", "));
    if node.outputs.is_empty() {
        out.push_str("()");
    } else {
        let outputs: Vec<String> = node.outputs.iter().map(PayloadTy::to_string).collect();
        out.push_str(&outputs.join(", "));
    }
    for (clause, fields) in [("reads", &node.reads), ("writes", &node.writes), ("key", &node.key)] {
        if !fields.is_empty() {
            let _ = write!(out, " {clause}({})", field_list(graph, fields));
        }
    }
    let _ = write!(out, " {}", quote(&node.label));
    if let Some(group) = node.fusion {
        let _ = write!(out, " fusion({group})");
    }
    if let Some(loc) = node.loc {
        let _ = write!(out, " loc({}:{}..{} @{}:{})", loc.file, loc.start, loc.end, loc.line, loc.col);
    }
    out.push('\n');
    for (src, edge) in unrepresentable {
        let _ = writeln!(
            out,
            "  // %{}: edge %{}#{} -> input {} is not representable (dropped)",
            index.index(),
            src.index(),
            edge.from_port,
            edge.to_port
        );
    }
}

/// The source of each input port, plus the edges that do not fit the one-edge-per-port
/// model (duplicates and ports beyond the node's inputs). When a port has several edges
/// the smallest source is printed so that the output does not depend on edge order.
type InputSources = (Vec<Option<(NodeIndex, u16)>>, Vec<(NodeIndex, Edge)>);

fn input_sources(graph: &Graph, index: NodeIndex, ports: usize) -> InputSources {
    let mut incoming: Vec<(u16, NodeIndex, u16)> = graph
        .nodes
        .edges_directed(index, petgraph::Direction::Incoming)
        .map(|e| (e.weight().to_port, e.source(), e.weight().from_port))
        .collect();
    incoming.sort();
    let mut sources = vec![None; ports];
    let mut extra = Vec::new();
    for (to_port, src, from_port) in incoming {
        match sources.get_mut(usize::from(to_port)) {
            Some(slot @ None) => *slot = Some((src, from_port)),
            _ => extra.push((src, Edge { from_port, to_port })),
        }
    }
    (sources, extra)
}

/// The op as the text form prints it: its keyword and attributes (`switch [%site0] 5`).
pub fn op_text(graph: &Graph, op: &Op) -> String {
    let attrs = op_attributes(graph, op);
    if attrs.is_empty() {
        op.keyword().to_string()
    } else {
        format!("{} {attrs}", op.keyword())
    }
}

/// The op's attributes as printed between its keyword and its inputs ("" when none).
pub(crate) fn op_attributes(graph: &Graph, op: &Op) -> String {
    let field = |id: FieldId| format!("%{}", field_ref(graph, id));
    match op {
        Op::Source | Op::Concat | Op::Forget => String::new(),
        Op::Read { path } => path_text(graph, path),
        Op::Const { value } => match value {
            ConstValue::Zeros => "zeros".into(),
            ConstValue::Ones => "ones".into(),
            // Debug is the shortest decimal that parses back to the same bits; NaNs carry
            // payload bits that no decimal spells, so they print as raw bits.
            ConstValue::Scalar(x) if x.is_nan() => format!("bits({:#010x})", x.to_bits()),
            ConstValue::Scalar(x) => format!("{x:?}"),
        },
        Op::Linear { param } | Op::Affine { param } => format!("@{}", symbol(param)),
        Op::Embedding { param, index } => format!("@{}[{}]", symbol(param), expr_text(graph, index)),
        Op::EmbeddingRows { param, field: id, index, count } => {
            format!("@{} {} [{}] [{}]", symbol(param), field(*id), expr_text(graph, index), expr_text(graph, count))
        }
        Op::Unary(f) => f.name().into(),
        Op::Binary(f) => f.name().into(),
        Op::Split { parts } => parts.to_string(),
        Op::Cond { pred } => format!("[{}]", expr_text(graph, pred)),
        Op::Switch { index, arms } => format!("[{}] {arms}", expr_text(graph, index)),
        Op::Phi { arms } => arms.to_string(),
        Op::Isu { field: id, value, inverse } => {
            let mut text = format!("{} := {}", field(*id), expr_text(graph, value));
            if let Some(inverse) = inverse {
                let _ = write!(text, " inverse {}", expr_text(graph, inverse));
            }
            text
        }
        Op::Loss(LossKind::CrossEntropy { label }) => format!("cross_entropy [{}]", expr_text(graph, label)),
        Op::Loss(LossKind::CrossEntropyMean { label, count }) => {
            format!("cross_entropy [{}] / [{}]", expr_text(graph, label), expr_text(graph, count))
        }
        Op::Loss(LossKind::Mse) => "mse".into(),
        Op::Loss(LossKind::Term { base, weight, count, judge }) => {
            let mut text = match base {
                LossBase::CrossEntropy { label } => format!("term cross_entropy [{}]", expr_text(graph, label)),
                LossBase::Mse => "term mse".into(),
                LossBase::Scalar => "term scalar".into(),
            };
            // As constants print: the shortest decimal that reads back exactly; NaN by its bits.
            if weight.is_nan() {
                let _ = write!(text, " * bits({:#010x})", weight.to_bits());
            } else {
                let _ = write!(text, " * {weight:?}");
            }
            if let Some(count) = count {
                let _ = write!(text, " / [{}]", expr_text(graph, count));
            }
            if let Some(judge) = judge {
                let _ = write!(text, " judged [{}]", expr_text(graph, judge));
            }
            text
        }
        Op::Sink { name } => quote(name),
        Op::Flatmap { field: id, count } | Op::Group { field: id, count } => {
            format!("{} [{}]", field(*id), expr_text(graph, count))
        }
        Op::Ungroup { field: id } => field(*id),
        Op::Gather { index } => format!("[{}]", expr_text(graph, index)),
        Op::ScatterSum { field: id, index, count } => {
            format!("{} [{}] [{}]", field(*id), expr_text(graph, index), expr_text(graph, count))
        }
        Op::GatherRows { field: id, index, count } => {
            format!("{} [{}] [{}]", field(*id), expr_text(graph, index), expr_text(graph, count))
        }
        Op::MaskRows { field: id, pred } => format!("{} [{}]", field(*id), expr_text(graph, pred)),
        Op::PartitionRows { field: id, index, arms } | Op::MergeRows { field: id, index, arms } => {
            format!("{} [{}] {arms}", field(*id), expr_text(graph, index))
        }
        Op::Reduce(f) => reduce_name(*f).into(),
        Op::TopK { k } => k.to_string(),
        Op::StateFromPayload { field: id, int } => match int {
            PayloadInt::Argmax => format!("{} := argmax", field(*id)),
            PayloadInt::TopK { k, slot } => format!("{} := top_k {k} [{}]", field(*id), expr_text(graph, slot)),
        },
        Op::Dropout { rate, site, context } => {
            let rate = if rate.is_nan() { format!("bits({:#010x})", rate.to_bits()) } else { format!("{rate:?}") };
            format!("{rate} site {site} over({})", field_list(graph, context))
        }
    }
}

pub(crate) const REDUCE_NAMES: [(ReduceFn, &str); 2] = [(ReduceFn::Sum, "sum"), (ReduceFn::Mean, "mean")];

fn reduce_name(f: ReduceFn) -> &'static str {
    REDUCE_NAMES.iter().find(|(g, _)| *g == f).map_or("?", |(_, name)| name)
}

fn field_list(graph: &Graph, fields: &[FieldId]) -> String {
    let names: Vec<String> = fields.iter().map(|id| format!("%{}", field_ref(graph, *id))).collect();
    names.join(", ")
}

/// A field reference without its `%`. A field id outside the schema cannot be named; it
/// prints as `?N`, which the parser rejects, rather than making the printer fail.
fn field_ref(graph: &Graph, id: FieldId) -> String {
    match graph.field(id) {
        Some(field) => field_name(&field.name),
        None => format!("?{}", id.0),
    }
}

pub(crate) fn field_name(name: &str) -> String {
    if is_identifier(name) {
        name.to_string()
    } else {
        quote(name)
    }
}

/// Binding strength of a binary state operator: higher binds tighter.
pub(crate) fn precedence(op: crate::IntOp) -> u8 {
    use crate::IntOp::*;
    match op {
        Or => 1,
        And => 2,
        Eq | Ne | Lt | Le | Gt | Ge => 3,
        Add | Sub => 4,
        Mul | Div | Rem => 5,
    }
}

/// Prints a state expression with the parentheses that the left-associative precedence
/// grammar needs, and no more, so that printing is canonical.
pub(crate) fn expr_text(graph: &Graph, expr: &StateExpr) -> String {
    let mut out = String::new();
    write_expr(graph, expr, 0, &mut out);
    out
}

/// `min` is the weakest operator allowed without parentheses at this position.
fn write_expr(graph: &Graph, expr: &StateExpr, min: u8, out: &mut String) {
    match expr {
        StateExpr::Field(id) => {
            let _ = write!(out, "%{}", field_ref(graph, *id));
        }
        StateExpr::Const(c) => {
            let _ = write!(out, "{c}");
        }
        StateExpr::Data(path) => write_path(graph, path, out),
        StateExpr::Len(path) => {
            out.push_str("len(");
            write_path(graph, path, out);
            out.push(')');
        }
        StateExpr::Not(inner) => {
            out.push('!');
            // Operands of `!` are atoms: a binary operand needs parentheses.
            write_expr(graph, inner, u8::MAX, out);
        }
        StateExpr::Bin(op, lhs, rhs) => {
            let p = precedence(*op);
            let parens = p < min;
            if parens {
                out.push('(');
            }
            write_expr(graph, lhs, p, out);
            let _ = write!(out, " {} ", op.symbol());
            // Left associativity: an equal-precedence right operand needs parentheses.
            write_expr(graph, rhs, p + 1, out);
            if parens {
                out.push(')');
            }
        }
    }
}

/// A path into the instance's data: `$` (the instance record), then `.field`, `[index]`
/// and `{variant}` steps.
fn path_text(graph: &Graph, path: &[DataStep]) -> String {
    let mut out = String::new();
    write_path(graph, path, &mut out);
    out
}

fn write_path(graph: &Graph, path: &[DataStep], out: &mut String) {
    out.push('$');
    for step in path {
        match step {
            DataStep::Field(name) if is_identifier(name) => {
                let _ = write!(out, ".{name}");
            }
            DataStep::Field(name) => {
                let _ = write!(out, ".{}", quote(name));
            }
            DataStep::Index(index) => {
                out.push('[');
                write_expr(graph, index, 0, out);
                out.push(']');
            }
            DataStep::Variant(k) => {
                let _ = write!(out, "{{{k}}}");
            }
        }
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: field names and data-path fields print bare when they are.
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(crate) fn is_symbol_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// Parameter and graph names: bare when made of letters, digits, `_` and `.` only.
fn symbol(name: &str) -> String {
    if !name.is_empty() && name.chars().all(is_symbol_char) {
        name.to_string()
    } else {
        quote(name)
    }
}

/// A double-quoted string whose escapes keep it on one line.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
