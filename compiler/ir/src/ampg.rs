//! The `.ampg` file: a compiled graph plus its partition plan, as `amprun` loads it.
//!
//! In: a [`Graph`] and an optional plan (write), or bytes (read). Out: bytes, or the graph
//! and plan back, or an [`AmpgError`]. Depends on the graph types and serde_json.
//!
//! Layout: the magic bytes `AMPG`, the format version as a little-endian u32 (now
//! [`VERSION`]), then one JSON document: `name`, `files`, `state`, `input` (the data schema), `params`, `nodes` (one
//! entry per node index, `null` for a hole left by a removed node), `edges` as
//! `[src, from_port, dst, to_port]`, `meta`, and `plan` (free-form until the planner
//! exists; a `null` plan reads back as `None`). Const scalars are stored as their f32 bits,
//! because JSON has no NaN or infinity and bits are exact.
//!
//! A file is untrusted input: `read` never panics, and what it allocates is bounded by the
//! file's size (serde_json grows vectors as elements arrive). Nesting is bounded by
//! [`MAX_JSON_DEPTH`], checked on the bytes before parsing: deep enough for every state
//! expression the verifier accepts (`limits::MAX_EXPR_DEPTH`), shallow enough for the stack.
//! After parsing, the document is checked so that every later stage can index without
//! checking again: node, field and port counts within limits, every edge between existing
//! nodes and ports, every field id and `loc` file in range, every shape's element count
//! within u64. What the verifier checks (types, keys, op arity) is left to the verifier.

use crate::{
    BinaryFn, ConstValue, DataStep, Edge, FieldId, Graph, Loc, LossKind, Node, Op, Param, PayloadInt, PayloadTy,
    ReduceFn, Schema, StateExpr, StateField, UnaryFn,
};
use petgraph::stable_graph::{NodeIndex, StableGraph};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The first four bytes of every `.ampg` file.
pub const MAGIC: [u8; 4] = *b"AMPG";
/// The format version this build writes and reads.
pub const VERSION: u32 = 2;
use crate::limits::{self, LimitError, MAX_EXPR_DEPTH};
pub use crate::limits::{MAX_FIELDS, MAX_NODES, MAX_PORTS};

/// Deepest JSON nesting a file may have: a state expression takes up to three levels per
/// level of its own (`{"Bin": ["Add", a, b]}`, a data path's `[{"Index": e}]`), plus the
/// document around it.
pub const MAX_JSON_DEPTH: usize = 3 * MAX_EXPR_DEPTH + 32;

/// Why bytes are not a loadable `.ampg` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmpgError {
    /// The file does not start with `AMPG`.
    BadMagic,
    /// The file ends inside the 8-byte header.
    Truncated,
    UnsupportedVersion {
        found: u32,
        supported: u32,
    },
    /// The document is not valid JSON or not the expected shape; `line` and `column` are
    /// 1-based within the JSON text (which starts at byte 8 of the file).
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    TooManyNodes {
        count: usize,
        limit: usize,
    },
    TooManyFields {
        count: usize,
        limit: usize,
    },
    DuplicateField {
        name: String,
    },
    /// The input schema refers to types that do not exist.
    BadSchema {
        message: String,
    },
    TooManyPorts {
        node: usize,
        count: usize,
        limit: usize,
    },
    /// A shape over `limits::MAX_TENSOR_ELEMENTS`; `what` names the node port or param.
    TooLarge {
        what: String,
        error: LimitError,
    },
    /// The JSON document nests deeper than [`MAX_JSON_DEPTH`].
    TooDeep {
        limit: usize,
    },
    FieldOutOfRange {
        node: usize,
        field: u16,
        fields: usize,
    },
    FileOutOfRange {
        node: usize,
        file: u32,
        files: usize,
    },
    /// Edge number `edge` names a node index that holds no node.
    MissingNode {
        edge: usize,
        node: u32,
    },
    /// Edge number `edge` names a port its node does not have.
    MissingPort {
        edge: usize,
        node: u32,
        port: u16,
        output: bool,
    },
}

impl fmt::Display for AmpgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmpgError::BadMagic => write!(f, "not an .ampg file (it does not start with `AMPG`)"),
            AmpgError::Truncated => write!(f, "the .ampg file ends inside its 8-byte header"),
            AmpgError::UnsupportedVersion { found, supported } => {
                write!(f, ".ampg format version {found} is not supported (this build reads version {supported})")
            }
            AmpgError::Json { line, column, message } => {
                write!(f, "malformed graph document at line {line}, column {column}: {message}")
            }
            AmpgError::TooManyNodes { count, limit } => write!(f, "{count} node slots, over the limit of {limit}"),
            AmpgError::TooManyFields { count, limit } => {
                write!(f, "{count} state fields, over the limit of {limit}")
            }
            AmpgError::DuplicateField { name } => write!(f, "two state fields are named `{name}`"),
            AmpgError::BadSchema { message } => write!(f, "bad input schema: {message}"),
            AmpgError::TooManyPorts { node, count, limit } => {
                write!(f, "node %{node} has {count} ports on one side, over the limit of {limit}")
            }
            AmpgError::TooLarge { what, error } => write!(f, "{what}: {error}"),
            AmpgError::TooDeep { limit } => write!(f, "the document nests deeper than {limit} levels"),
            AmpgError::FieldOutOfRange { node, field, fields } => {
                write!(f, "node %{node} uses state field {field}, but the state has {fields} fields")
            }
            AmpgError::FileOutOfRange { node, file, files } => {
                write!(f, "node %{node} has a location in file {file}, but the graph lists {files} files")
            }
            AmpgError::MissingNode { edge, node } => {
                write!(f, "edge {edge} connects node %{node}, which does not exist")
            }
            AmpgError::MissingPort { edge, node, port, output } => {
                let side = if *output { "output" } else { "input" };
                write!(f, "edge {edge} uses {side} port {port} of node %{node}, which has no such port")
            }
        }
    }
}

impl std::error::Error for AmpgError {}

/// Serializes `graph` and `plan` into the bytes of an `.ampg` file.
pub fn write(graph: &Graph, plan: Option<&serde_json::Value>) -> Vec<u8> {
    let mut out = Vec::from(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    // Serializing plain structs with string map keys into a Vec has no failure case; the
    // error type only exists for io writers and custom serializers.
    serde_json::to_writer(&mut out, &Document::of(graph, plan))
        .expect("serializing a graph document into memory cannot fail");
    out
}

/// The JSON document of an `.ampg` file (what follows its 8-byte header), for
/// `ampc compile --emit ir-json` and for tools that want to read a graph without Rust.
pub fn to_json(graph: &Graph, plan: Option<&serde_json::Value>) -> serde_json::Value {
    // As in `write`: the document has only string map keys, so this cannot fail.
    serde_json::to_value(Document::of(graph, plan)).expect("a graph document is always representable as JSON")
}

/// Loads an `.ampg` file. Never panics; see the module docs for what is checked.
pub fn read(bytes: &[u8]) -> Result<(Graph, Option<serde_json::Value>), AmpgError> {
    let Some(magic) = bytes.get(..4) else {
        return Err(if MAGIC.starts_with(bytes) { AmpgError::Truncated } else { AmpgError::BadMagic });
    };
    if magic != MAGIC {
        return Err(AmpgError::BadMagic);
    }
    let version = bytes.get(4..8).and_then(|v| <[u8; 4]>::try_from(v).ok()).ok_or(AmpgError::Truncated)?;
    let found = u32::from_le_bytes(version);
    if found != VERSION {
        return Err(AmpgError::UnsupportedVersion { found, supported: VERSION });
    }
    let json = bytes.get(8..).unwrap_or_default();
    if json_depth(json) > MAX_JSON_DEPTH {
        return Err(AmpgError::TooDeep { limit: MAX_JSON_DEPTH });
    }
    let json_error = |e: serde_json::Error| {
        // serde_json's message ends with the position, which the variant holds already.
        let message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = message.strip_suffix(&suffix).map_or(message.clone(), str::to_string);
        AmpgError::Json { line: e.line(), column: e.column(), message }
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    // Bounded above instead: serde_json's fixed 128 is shallower than the expressions the
    // verifier accepts, so `ampc compile` wrote graphs this refused.
    de.disable_recursion_limit();
    let doc = Document::deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(json_error)?;
    doc.check()?;
    let Document { name, files, state, input, params, nodes, edges, meta, plan } = doc;
    let slots = nodes.into_iter().map(|slot| slot.map(Node::from)).collect();
    let graph = Graph { name, files, state, input, params, nodes: graph_from_slots(slots, &edges), meta };
    Ok((graph, plan))
}

/// Builds the node graph with node `i` at index `i`; a `None` slot becomes a hole (added as
/// a placeholder, then removed) so that indices match the original graph. Holes are removed
/// from the highest down, so a later `add_node` reuses the lowest hole first. Edges whose
/// endpoints are not real nodes are skipped: callers check edges first, this only keeps a
/// bad edge from panicking.
pub(crate) fn graph_from_slots(slots: Vec<Option<Node>>, edges: &[(u32, u16, u32, u16)]) -> StableGraph<Node, Edge> {
    let mut graph = StableGraph::with_capacity(slots.len(), edges.len());
    let mut holes = Vec::new();
    for slot in slots {
        match slot {
            Some(node) => {
                graph.add_node(node);
            }
            None => holes.push(graph.add_node(placeholder())),
        }
    }
    let hole_set: HashSet<NodeIndex> = holes.iter().copied().collect();
    for &(src, from_port, dst, to_port) in edges {
        let (a, b) = (NodeIndex::new(src as usize), NodeIndex::new(dst as usize));
        if graph.contains_node(a) && graph.contains_node(b) && !hole_set.contains(&a) && !hole_set.contains(&b) {
            graph.add_edge(a, b, Edge { from_port, to_port });
        }
    }
    for hole in holes.into_iter().rev() {
        graph.remove_node(hole);
    }
    graph
}

fn placeholder() -> Node {
    Node {
        op: Op::Source,
        inputs: Vec::new(),
        outputs: Vec::new(),
        reads: Vec::new(),
        writes: Vec::new(),
        key: Vec::new(),
        label: String::new(),
        loc: None,
        fusion: None,
    }
}

/// The JSON document after the header. Field order is the file's key order.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    name: String,
    files: Vec<String>,
    state: Vec<StateField>,
    input: Option<Schema>,
    params: Vec<Param>,
    nodes: Vec<Option<NodeDoc>>,
    edges: Vec<(u32, u16, u32, u16)>,
    meta: BTreeMap<String, String>,
    plan: Option<serde_json::Value>,
}

impl Document {
    fn of(graph: &Graph, plan: Option<&serde_json::Value>) -> Document {
        let slots = graph.nodes.node_indices().next_back().map_or(0, |last| last.index() + 1);
        let nodes = (0..slots).map(|i| graph.nodes.node_weight(NodeIndex::new(i)).map(NodeDoc::from)).collect();
        let mut edges: Vec<(u32, u16, u32, u16)> = graph
            .nodes
            .edge_indices()
            .filter_map(|e| {
                let (src, dst) = graph.nodes.edge_endpoints(e)?;
                let weight = graph.nodes.edge_weight(e)?;
                Some((src.index() as u32, weight.from_port, dst.index() as u32, weight.to_port))
            })
            .collect();
        // Sorted so that equal graphs give equal files whatever order their edges were added in.
        edges.sort_unstable();
        Document {
            name: graph.name.clone(),
            files: graph.files.clone(),
            state: graph.state.clone(),
            input: graph.input.clone(),
            params: graph.params.clone(),
            nodes,
            edges,
            meta: graph.meta.clone(),
            plan: plan.cloned(),
        }
    }

    /// The structural checks listed in the module docs.
    fn check(&self) -> Result<(), AmpgError> {
        if self.nodes.len() > MAX_NODES {
            return Err(AmpgError::TooManyNodes { count: self.nodes.len(), limit: MAX_NODES });
        }
        if self.state.len() > MAX_FIELDS {
            return Err(AmpgError::TooManyFields { count: self.state.len(), limit: MAX_FIELDS });
        }
        let mut names = HashSet::new();
        for field in &self.state {
            if !names.insert(field.name.as_str()) {
                return Err(AmpgError::DuplicateField { name: field.name.clone() });
            }
        }
        if let Some(schema) = &self.input {
            schema.check().map_err(|message| AmpgError::BadSchema { message })?;
        }
        for param in &self.params {
            if let Err(error) = limits::tensor_elements(&param.shape) {
                return Err(AmpgError::TooLarge { what: format!("param `{}`", param.name), error });
            }
        }
        for (index, node) in self.nodes.iter().enumerate() {
            if let Some(node) = node {
                self.check_node(index, node)?;
            }
        }
        for (edge, &(src, from_port, dst, to_port)) in self.edges.iter().enumerate() {
            for (node, port, output) in [(src, from_port, true), (dst, to_port, false)] {
                let Some(Some(found)) = self.nodes.get(node as usize) else {
                    return Err(AmpgError::MissingNode { edge, node });
                };
                let ports = if output { found.outputs.len() } else { found.inputs.len() };
                if usize::from(port) >= ports {
                    return Err(AmpgError::MissingPort { edge, node, port, output });
                }
            }
        }
        Ok(())
    }

    fn check_node(&self, index: usize, node: &NodeDoc) -> Result<(), AmpgError> {
        for (side, ports) in [("input", &node.inputs), ("output", &node.outputs)] {
            if ports.len() > MAX_PORTS {
                return Err(AmpgError::TooManyPorts { node: index, count: ports.len(), limit: MAX_PORTS });
            }
            for (port, ty) in ports.iter().enumerate() {
                if let PayloadTy::F32(dims) | PayloadTy::Batch(dims) = ty {
                    if let Err(error) = limits::tensor_elements(dims) {
                        return Err(AmpgError::TooLarge { what: format!("node %{index} {side} port {port}"), error });
                    }
                }
            }
        }
        let mut fields = Vec::new();
        fields.extend(&node.reads);
        fields.extend(&node.writes);
        fields.extend(&node.key);
        node.op.fields(&mut fields);
        if let Some(field) = fields.iter().find(|f| usize::from(f.0) >= self.state.len()) {
            return Err(AmpgError::FieldOutOfRange { node: index, field: field.0, fields: self.state.len() });
        }
        if let Some(loc) = node.loc {
            if loc.file as usize >= self.files.len() {
                return Err(AmpgError::FileOutOfRange { node: index, file: loc.file, files: self.files.len() });
            }
        }
        Ok(())
    }
}

/// The deepest nesting of arrays and objects in `json`, outside strings. Malformed text
/// is left for the parser to report.
fn json_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `Node` as stored: the same fields, with the op in its file form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDoc {
    op: OpDoc,
    inputs: Vec<PayloadTy>,
    outputs: Vec<PayloadTy>,
    reads: Vec<FieldId>,
    writes: Vec<FieldId>,
    key: Vec<FieldId>,
    label: String,
    loc: Option<Loc>,
    fusion: Option<u32>,
}

/// `Op` as stored. It mirrors `Op` rather than reusing its derive so that the file format
/// changes only on purpose, and so that const scalars can be stored as bits.
#[derive(Serialize, Deserialize)]
enum OpDoc {
    Source,
    Read { path: Vec<DataStep> },
    Const { value: ConstDoc },
    Linear { param: String },
    Embedding { param: String, index: StateExpr },
    Unary(UnaryFn),
    Binary(BinaryFn),
    Concat,
    Split { parts: u32 },
    Forget,
    Cond { pred: StateExpr },
    Switch { index: StateExpr, arms: u32 },
    Phi { arms: u32 },
    Isu { field: FieldId, value: StateExpr, inverse: Option<StateExpr> },
    Loss(LossKind),
    Sink { name: String },
    Flatmap { field: FieldId, count: StateExpr },
    Group { field: FieldId, count: StateExpr },
    Ungroup { field: FieldId },
    Gather { index: StateExpr },
    ScatterSum { field: FieldId, index: StateExpr, count: StateExpr },
    Reduce(ReduceFn),
    TopK { k: u32 },
    StateFromPayload { field: FieldId, int: PayloadInt },
}

#[derive(Serialize, Deserialize)]
enum ConstDoc {
    Zeros,
    Ones,
    /// `f32::to_bits` of the scalar.
    ScalarBits(u32),
}

impl OpDoc {
    /// Every state field the op names, for the range check.
    fn fields(&self, out: &mut Vec<FieldId>) {
        match self {
            // A read path's indices are expressions; `Len` of the same path visits them all.
            OpDoc::Read { path } => StateExpr::Len(path.clone()).fields(out),
            OpDoc::Embedding { index, .. } | OpDoc::Switch { index, .. } => index.fields(out),
            OpDoc::Cond { pred } => pred.fields(out),
            OpDoc::Isu { field, value, inverse } => {
                out.push(*field);
                value.fields(out);
                if let Some(inverse) = inverse {
                    inverse.fields(out);
                }
            }
            OpDoc::Loss(kind) => kind.exprs().for_each(|e| e.fields(out)),
            OpDoc::Flatmap { field, count } | OpDoc::Group { field, count } => {
                out.push(*field);
                count.fields(out);
            }
            OpDoc::Ungroup { field } => out.push(*field),
            OpDoc::Gather { index } => index.fields(out),
            OpDoc::ScatterSum { field, index, count } => {
                out.push(*field);
                index.fields(out);
                count.fields(out);
            }
            OpDoc::StateFromPayload { field, int } => {
                out.push(*field);
                if let PayloadInt::TopK { slot, .. } = int {
                    slot.fields(out);
                }
            }
            _ => {}
        }
    }
}

impl From<&Node> for NodeDoc {
    fn from(node: &Node) -> NodeDoc {
        NodeDoc {
            op: OpDoc::from(&node.op),
            inputs: node.inputs.clone(),
            outputs: node.outputs.clone(),
            reads: node.reads.clone(),
            writes: node.writes.clone(),
            key: node.key.clone(),
            label: node.label.clone(),
            loc: node.loc,
            fusion: node.fusion,
        }
    }
}

impl From<NodeDoc> for Node {
    fn from(doc: NodeDoc) -> Node {
        let NodeDoc { op, inputs, outputs, reads, writes, key, label, loc, fusion } = doc;
        Node { op: Op::from(op), inputs, outputs, reads, writes, key, label, loc, fusion }
    }
}

impl From<&Op> for OpDoc {
    fn from(op: &Op) -> OpDoc {
        match op.clone() {
            Op::Source => OpDoc::Source,
            Op::Read { path } => OpDoc::Read { path },
            Op::Const { value } => OpDoc::Const {
                value: match value {
                    ConstValue::Zeros => ConstDoc::Zeros,
                    ConstValue::Ones => ConstDoc::Ones,
                    ConstValue::Scalar(x) => ConstDoc::ScalarBits(x.to_bits()),
                },
            },
            Op::Linear { param } => OpDoc::Linear { param },
            Op::Embedding { param, index } => OpDoc::Embedding { param, index },
            Op::Unary(f) => OpDoc::Unary(f),
            Op::Binary(f) => OpDoc::Binary(f),
            Op::Concat => OpDoc::Concat,
            Op::Split { parts } => OpDoc::Split { parts },
            Op::Forget => OpDoc::Forget,
            Op::Cond { pred } => OpDoc::Cond { pred },
            Op::Switch { index, arms } => OpDoc::Switch { index, arms },
            Op::Phi { arms } => OpDoc::Phi { arms },
            Op::Isu { field, value, inverse } => OpDoc::Isu { field, value, inverse },
            Op::Loss(kind) => OpDoc::Loss(kind),
            Op::Sink { name } => OpDoc::Sink { name },
            Op::Flatmap { field, count } => OpDoc::Flatmap { field, count },
            Op::Group { field, count } => OpDoc::Group { field, count },
            Op::Ungroup { field } => OpDoc::Ungroup { field },
            Op::Gather { index } => OpDoc::Gather { index },
            Op::ScatterSum { field, index, count } => OpDoc::ScatterSum { field, index, count },
            Op::Reduce(f) => OpDoc::Reduce(f),
            Op::TopK { k } => OpDoc::TopK { k },
            Op::StateFromPayload { field, int } => OpDoc::StateFromPayload { field, int },
        }
    }
}

impl From<OpDoc> for Op {
    fn from(doc: OpDoc) -> Op {
        match doc {
            OpDoc::Source => Op::Source,
            OpDoc::Read { path } => Op::Read { path },
            OpDoc::Const { value } => Op::Const {
                value: match value {
                    ConstDoc::Zeros => ConstValue::Zeros,
                    ConstDoc::Ones => ConstValue::Ones,
                    ConstDoc::ScalarBits(bits) => ConstValue::Scalar(f32::from_bits(bits)),
                },
            },
            OpDoc::Linear { param } => Op::Linear { param },
            OpDoc::Embedding { param, index } => Op::Embedding { param, index },
            OpDoc::Unary(f) => Op::Unary(f),
            OpDoc::Binary(f) => Op::Binary(f),
            OpDoc::Concat => Op::Concat,
            OpDoc::Split { parts } => Op::Split { parts },
            OpDoc::Forget => Op::Forget,
            OpDoc::Cond { pred } => Op::Cond { pred },
            OpDoc::Switch { index, arms } => Op::Switch { index, arms },
            OpDoc::Phi { arms } => Op::Phi { arms },
            OpDoc::Isu { field, value, inverse } => Op::Isu { field, value, inverse },
            OpDoc::Loss(kind) => Op::Loss(kind),
            OpDoc::Sink { name } => Op::Sink { name },
            OpDoc::Flatmap { field, count } => Op::Flatmap { field, count },
            OpDoc::Group { field, count } => Op::Group { field, count },
            OpDoc::Ungroup { field } => Op::Ungroup { field },
            OpDoc::Gather { index } => Op::Gather { index },
            OpDoc::ScatterSum { field, index, count } => Op::ScatterSum { field, index, count },
            OpDoc::Reduce(f) => Op::Reduce(f),
            OpDoc::TopK { k } => Op::TopK { k },
            OpDoc::StateFromPayload { field, int } => Op::StateFromPayload { field, int },
        }
    }
}
