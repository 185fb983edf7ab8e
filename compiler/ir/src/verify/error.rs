//! What the verifier reports: one [`VerifyError`] per broken invariant, naming the node
//! (index, label and op) and, for type and shape errors, both types.

use crate::{FieldId, FieldRole, PayloadTy};
use petgraph::stable_graph::NodeIndex;
use std::fmt;

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The node at fault; `None` for errors about the whole graph (state schema, no source).
    pub node: Option<NodeRef>,
    pub kind: VerifyErrorKind,
}

/// A node as errors name it: `node %7 `cell` (linear @cell)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub index: NodeIndex,
    pub label: String,
    /// The op keyword with its defining attribute (`linear @cell`, `phi 2`, `isu %t`).
    pub op: String,
}

/// A state field as errors name it: `%t` when it exists, `field #9` when it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRef {
    pub id: FieldId,
    pub name: Option<String>,
}

/// How many ports an op needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortDir {
    Input,
    Output,
}

/// What a port's payload type must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeExpectation {
    Unit,
    /// Any f32 tensor, scalars included.
    AnyF32,
    /// An f32 tensor of rank at least one.
    F32Ranked,
    /// An f32 vector.
    F32Rank1,
    /// A batch `f32[?, ...]`.
    AnyBatch,
    /// A batch or an f32 tensor of rank at least 1 (something with rows).
    Rows,
    Exactly(PayloadTy),
}

/// The shape a parameter must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamExpectation {
    /// A matrix; the string names its dimensions (`[out, in]`, `[rows, dim]`).
    Matrix(&'static str),
    Exactly(Vec<u64>),
}

/// Where a node uses a state field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldUse {
    Reads,
    Writes,
    Key,
    Predicate,
    SwitchIndex,
    IsuTarget,
    IsuValue,
    IsuInverse,
    ReadPath,
    EmbeddingIndex,
    LossLabel,
    /// The field every instance starts with, written by the source.
    SourceInstance,
    /// The element field a flatmap, group, ungroup or scatter_sum numbers rows with.
    ElementField,
    /// The count of a flatmap, group or scatter_sum.
    Count,
    /// The row index of a gather or scatter_sum.
    RowIndex,
    /// The field state_from_payload writes, or its slot expression.
    PayloadInt,
    /// A field of a dropout's context, whose value its mask hashes.
    DropoutContext,
}

/// Why a node must have a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyReason {
    Caches,
    JoinsInputs,
    JoinsGradients,
    FansOut,
}

/// What a loop lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopPart {
    Header,
    Exit,
    Step,
}

/// The broken invariant, with what is needed to explain it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyErrorKind {
    // The state schema and the parameters.
    EmptyState,
    FirstFieldNotInstance { name: String, role: FieldRole },
    TooManyFields { count: usize },
    FieldNameNotIdentifier { field: u16, name: String },
    DuplicateFieldName { name: String, first: u16, second: u16 },
    DuplicateParam { name: String },

    // Sources and ends.
    NoSource,
    ExtraSource { first: NodeIndex },
    NoLossOrSink,

    // Ports and edges.
    OutputPortOutOfRange { port: u16, outputs: usize, target: NodeIndex },
    InputPortOutOfRange { port: u16, inputs: usize, source: NodeIndex },
    InputUnconnected { port: usize },
    InputMultiplyConnected { port: usize, edges: usize },
    EdgeTypeMismatch { port: u16, source: NodeIndex, source_port: u16, found: PayloadTy, expected: PayloadTy },
    SelfLoop { from_port: u16, to_port: u16 },

    // Arity and types of each op.
    PortCount { dir: PortDir, expected: Arity, found: usize },
    PortType { dir: PortDir, port: usize, found: PayloadTy, expected: TypeExpectation },
    InputsDiffer { port: usize, found: PayloadTy, first: PayloadTy },
    BinaryShapes { lhs: PayloadTy, rhs: PayloadTy },
    NoArms,
    MissingParam { name: String },
    ParamShape { name: String, shape: Vec<u64>, expected: ParamExpectation },
    ParamMismatch { dir: PortDir, found: PayloadTy, param: String, shape: Vec<u64>, expected: PayloadTy },
    SplitUneven { found: PayloadTy, parts: u32 },
    ConcatTooLarge,
    LossWeightNotFinite { bits: u32 },
    DropoutRate { bits: u32 },

    // Sizes over `crate::limits`.
    OverLimit { error: crate::limits::LimitError },
    ParamTooLarge { name: String, error: crate::limits::LimitError },
    ExprTooDeep { limit: usize },

    // State fields.
    FieldOutOfRange { field: FieldId, fields: usize, used_as: FieldUse },
    ReadNotDeclared { field: FieldRef, used_as: FieldUse },
    WriteNotDeclared { field: FieldRef, used_as: FieldUse },
    UndueWrite { field: FieldRef },
    WritesInstance { field: FieldRef },

    // Keys.
    KeyMissingInstance { reason: KeyReason, key: Vec<FieldRef>, instance: FieldRef },
    KeyMissingCounter { reason: KeyReason, key: Vec<FieldRef>, counter: FieldRef, step: NodeIndex, more: usize },

    // Loops.
    LoopMissing { part: LoopPart, size: usize, members: Vec<NodeIndex> },
    LoopTooDeep { limit: usize },

    // Reachability.
    UnreachableFromSource,
    Dead,

    // Defined before use.
    ReadBeforeWrite { field: FieldRef, via: Option<NodeIndex> },
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(node) => write!(f, "{node}: {}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl std::error::Error for VerifyError {}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.label.is_empty() {
            write!(f, "node %{} ({})", self.index.index(), self.op)
        } else {
            write!(f, "node %{} `{}` ({})", self.index.index(), self.label, self.op)
        }
    }
}

impl fmt::Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "%{name}"),
            None => write!(f, "field #{}", self.id.0),
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(n) => write!(f, "{n}"),
            Arity::AtLeast(n) => write!(f, "at least {n}"),
        }
    }
}

impl fmt::Display for PortDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortDir::Input => "input",
            PortDir::Output => "output",
        })
    }
}

impl fmt::Display for TypeExpectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeExpectation::Unit => f.write_str("unit"),
            TypeExpectation::AnyF32 => f.write_str("an f32 tensor"),
            TypeExpectation::F32Ranked => f.write_str("an f32 tensor of rank at least 1"),
            TypeExpectation::F32Rank1 => f.write_str("an f32 vector (rank 1)"),
            TypeExpectation::AnyBatch => f.write_str("a batch `f32[?, ...]`"),
            TypeExpectation::Rows => f.write_str("a batch or an f32 tensor of rank at least 1"),
            TypeExpectation::Exactly(ty) => write!(f, "{ty}"),
        }
    }
}

impl fmt::Display for ParamExpectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamExpectation::Matrix(dims) => write!(f, "a matrix {dims}"),
            ParamExpectation::Exactly(shape) => write!(f, "{}", Shape(shape)),
        }
    }
}

impl fmt::Display for FieldUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldUse::Reads => "`reads`",
            FieldUse::Writes => "`writes`",
            FieldUse::Key => "the key",
            FieldUse::Predicate => "the predicate",
            FieldUse::SwitchIndex => "the switch index",
            FieldUse::IsuTarget => "the isu target",
            FieldUse::IsuValue => "the isu value",
            FieldUse::IsuInverse => "the isu inverse",
            FieldUse::ReadPath => "the read path",
            FieldUse::EmbeddingIndex => "the embedding index",
            FieldUse::LossLabel => "the loss label",
            FieldUse::ElementField => "the element field",
            FieldUse::Count => "the element count",
            FieldUse::RowIndex => "the row index",
            FieldUse::PayloadInt => "the int from a payload",
            FieldUse::SourceInstance => "the source",
            FieldUse::DropoutContext => "the dropout context",
        })
    }
}

impl fmt::Display for KeyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyReason::Caches => "caches for its backward pass",
            KeyReason::JoinsInputs => "joins its inputs by key",
            KeyReason::JoinsGradients => "joins its outputs' gradients by key",
            KeyReason::FansOut => "fans out, so it sums its consumers' gradients by key",
        })
    }
}

impl fmt::Display for LoopPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoopPart::Header => "a phi or a gated group (the loop header)",
            LoopPart::Exit => "a cond or switch (the loop exit)",
            LoopPart::Step => "an isu (the loop step)",
        })
    }
}

/// A parameter's shape, `[128, 256]`.
struct Shape<'a>(&'a [u64]);

impl fmt::Display for Shape<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// A key, `(%inst, %t)`.
struct Key<'a>(&'a [FieldRef]);

impl fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, field) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{field}")?;
        }
        f.write_str(")")
    }
}

/// Node indices, `%3, %4, %5`, then how many more.
struct Members<'a>(&'a [NodeIndex], usize);

impl fmt::Display for Members<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "%{}", n.index())?;
        }
        if self.1 > self.0.len() {
            write!(f, ", … {} more", self.1 - self.0.len())?;
        }
        Ok(())
    }
}

impl fmt::Display for VerifyErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use VerifyErrorKind as K;
        match self {
            K::EmptyState => f.write_str("the state schema is empty; field 0 must be the instance"),
            K::FirstFieldNotInstance { name, role } => {
                write!(f, "state field 0 `{name}` has role {}; field 0 must have role instance", role.as_str())
            }
            K::TooManyFields { count } => write!(f, "the state has {count} fields; at most 65535 are allowed"),
            K::FieldNameNotIdentifier { field, name } => {
                write!(f, "state field {field} is named {name:?}, which is not an identifier")
            }
            K::DuplicateFieldName { name, first, second } => {
                write!(f, "state fields {first} and {second} are both named `{name}`")
            }
            K::DuplicateParam { name } => write!(f, "parameter `{name}` is declared more than once"),
            K::NoSource => f.write_str("the graph has no `source` node"),
            K::ExtraSource { first } => {
                write!(f, "is a second `source` (the first is %{}); a graph has exactly one", first.index())
            }
            K::NoLossOrSink => f.write_str("the graph has no `loss` and no `sink` node; nothing ends the forward pass"),
            K::OutputPortOutOfRange { port, outputs, target } => write!(
                f,
                "an edge to %{} leaves output port {port}, but the node has {outputs} output{}",
                target.index(),
                plural(*outputs)
            ),
            K::InputPortOutOfRange { port, inputs, source } => write!(
                f,
                "an edge from %{} enters input port {port}, but the node has {inputs} input{}",
                source.index(),
                plural(*inputs)
            ),
            K::InputUnconnected { port } => write!(f, "input {port} has no incoming edge"),
            K::InputMultiplyConnected { port, edges } => {
                write!(f, "input {port} has {edges} incoming edges; an input port takes exactly one")
            }
            K::EdgeTypeMismatch { port, source, source_port, found, expected } => write!(
                f,
                "input {port} has type {expected} but its edge from %{}#{source_port} carries {found}",
                source.index()
            ),
            K::SelfLoop { from_port, to_port } => {
                write!(f, "has an edge from its own output {from_port} to its own input {to_port} (a self loop)")
            }
            K::PortCount { dir, expected, found } => {
                write!(f, "has {found} {dir}{}, expected {expected}", plural(*found))
            }
            K::PortType { dir, port, found, expected } => {
                write!(f, "{dir} {port} has type {found}, expected {expected}")
            }
            K::InputsDiffer { port, found, first } => {
                write!(f, "input {port} has type {found}, which differs from input 0's {first}")
            }
            K::BinaryShapes { lhs, rhs } => {
                write!(f, "inputs {lhs} and {rhs} differ in shape and neither is a scalar f32")
            }
            K::NoArms => f.write_str("has zero arms; it needs at least one"),
            K::MissingParam { name } => write!(f, "parameter `{name}` does not exist"),
            K::ParamShape { name, shape, expected } => {
                write!(f, "parameter {name} has shape {}, expected {expected}", Shape(shape))
            }
            K::ParamMismatch { dir, found, param, shape, expected } => {
                write!(f, "{dir} {found} does not match {param} {} (expects {expected})", Shape(shape))
            }
            K::SplitUneven { found, parts } => {
                write!(f, "input {found} cannot be split into {parts} equal parts (expects f32[n * {parts}])")
            }
            K::ConcatTooLarge => f.write_str("the concatenated width overflows u64"),
            // By its bits, so that the kind stays `Eq`.
            K::LossWeightNotFinite { bits } => {
                write!(f, "has the loss weight {}, which is not finite", f32::from_bits(*bits))
            }
            // By its bits, as the loss weight.
            K::DropoutRate { bits } => write!(f, "has the dropout rate {}, outside [0, 1)", f32::from_bits(*bits)),
            K::OverLimit { error } => write!(f, "{error}"),
            K::ParamTooLarge { name, error } => write!(f, "parameter `{name}`: {error}"),
            K::ExprTooDeep { limit } => write!(f, "a state expression nests deeper than {limit}"),
            K::FieldOutOfRange { field, fields, used_as } => {
                write!(f, "{used_as} names field #{}, but the state has {fields} field{}", field.0, plural(*fields))
            }
            K::ReadNotDeclared { field, used_as } => {
                write!(f, "{used_as} reads {field}, but the node's `reads` does not list it")
            }
            K::WriteNotDeclared { field, used_as } => {
                write!(f, "{used_as} writes {field}, but the node's `writes` does not list it")
            }
            K::UndueWrite { field } => write!(f, "`writes` lists {field}, which this op does not write"),
            K::WritesInstance { field } => {
                write!(f, "writes the instance field {field}; only the source may write it")
            }
            K::KeyMissingInstance { reason, key, instance } => write!(
                f,
                "{reason}, but its key {} lacks the instance field {instance}; activations of different \
                 instances would collide",
                Key(key)
            ),
            K::KeyMissingCounter { reason, key, counter, step, more } => {
                write!(
                    f,
                    "{reason} inside the loop counted by {counter} (stepped by %{}), but its key {} lacks {counter}",
                    step.index(),
                    Key(key)
                )?;
                if *more > 0 {
                    write!(f, " and {more} more loop counter{}", plural(*more))?;
                }
                f.write_str("; two iterations' activations would collide")
            }
            K::LoopMissing { part, size, members } => write!(
                f,
                "is in a cycle of {size} nodes ({}) without {part}; a loop needs a header (a phi, or a \
                 group gated from outside it), an exit cond or switch, and an isu step",
                Members(members, *size)
            ),
            K::LoopTooDeep { limit } => write!(f, "heads loops nested more than {limit} deep"),
            K::UnreachableFromSource => f.write_str("is not reachable from the source"),
            K::Dead => f.write_str("reaches no loss or sink: dead node (run dead-node elimination)"),
            K::ReadBeforeWrite { field, via } => {
                write!(f, "reads {field}, which is not written on every path from the source")?;
                match via {
                    Some(pred) => write!(f, " (not on the path through %{})", pred.index()),
                    None => Ok(()),
                }
            }
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
