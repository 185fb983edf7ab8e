//! The AMP IR: a static dataflow graph whose nodes exchange forward and backward
//! messages made of a payload tensor and an integer state (see `docs/IR.md`).
//!
//! In: nothing of Amp's (this crate is shared by the compiler, which builds graphs, and
//! the runtime, which executes them; it depends on neither). Out: the graph types, the
//! verifier, the stable text form (print and parse, round-tripping exactly), the `.ampg`
//! file format, and Graphviz output. Invariant: the runtime executes only graphs the
//! verifier accepted; a graph read from a file is untrusted input.

pub mod ampg;
pub mod dot;
pub mod dropout;
pub mod limits;
pub mod schema;
pub mod text;
pub mod units;
pub mod verify;
pub mod vocab;

pub use schema::{DataTy, EnumSchema, FieldSchema, RecordSchema, Schema, VariantSchema};
pub use vocab::{BinaryFn, Elementwise, UnaryFn};

use petgraph::stable_graph::{NodeIndex, StableGraph};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Index of a field of the message state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FieldId(pub u16);

/// What a state field means; used for keys, documentation and the runtime's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldRole {
    /// Which instance a message belongs to; always field 0.
    Instance,
    /// A loop counter.
    Counter,
    /// An int read from the instance or computed from ints (a token, a label, a bound).
    Data,
    /// The index of a collection element.
    Element,
    /// The tree node inside structural recursion.
    TreeNode,
    /// The routing slot (expert choice).
    Slot,
}

impl FieldRole {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldRole::Instance => "instance",
            FieldRole::Counter => "counter",
            FieldRole::Data => "data",
            FieldRole::Element => "element",
            FieldRole::TreeNode => "tree_node",
            FieldRole::Slot => "slot",
        }
    }

    pub fn parse(s: &str) -> Option<FieldRole> {
        [
            FieldRole::Instance,
            FieldRole::Counter,
            FieldRole::Data,
            FieldRole::Element,
            FieldRole::TreeNode,
            FieldRole::Slot,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One field of the state schema. Its name is unique in the graph (`inst`, `t0`, `tok`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateField {
    pub name: String,
    pub role: FieldRole,
}

/// The payload type of a port: nothing (a control message) or an f32 tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PayloadTy {
    Unit,
    /// Concrete dimensions; `[]` is a scalar.
    F32(Vec<u64>),
    /// A batch of a collection's elements: `f32[?, dims...]`, one row per element, the
    /// number of rows known only at run time (from the instance's data).
    Batch(Vec<u64>),
}

impl PayloadTy {
    /// Elements of the payload; of one row for a batch.
    pub fn elements(&self) -> u64 {
        match self {
            PayloadTy::Unit => 0,
            PayloadTy::F32(dims) | PayloadTy::Batch(dims) => dims.iter().product(),
        }
    }
}

impl fmt::Display for PayloadTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadTy::Unit => f.write_str("unit"),
            PayloadTy::F32(dims) if dims.is_empty() => f.write_str("f32"),
            PayloadTy::F32(dims) => {
                let parts: Vec<String> = dims.iter().map(u64::to_string).collect();
                write!(f, "f32[{}]", parts.join(", "))
            }
            PayloadTy::Batch(dims) => {
                let parts: Vec<String> =
                    std::iter::once("?".to_string()).chain(dims.iter().map(u64::to_string)).collect();
                write!(f, "f32[{}]", parts.join(", "))
            }
        }
    }
}

/// A parameter tensor, named as in PyTorch's `state_dict` (`cell.weight`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub name: String,
    pub shape: Vec<u64>,
    pub init: ParamInit,
}

/// How a parameter is initialised (as PyTorch initialises `nn.Linear`, `nn.Embedding` and
/// `nn.LayerNorm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParamInit {
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
    Uniform { fan_in: u64 },
    /// `N(0, 1)`.
    Normal,
    /// All ones (a LayerNorm's weight).
    Ones,
    /// All zeros (a LayerNorm's bias).
    Zeros,
}

impl fmt::Display for ParamInit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamInit::Uniform { fan_in } => write!(f, "uniform({fan_in})"),
            ParamInit::Normal => f.write_str("normal"),
            ParamInit::Ones => f.write_str("ones"),
            ParamInit::Zeros => f.write_str("zeros"),
        }
    }
}

/// The value a `const` node fills its output with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConstValue {
    Zeros,
    Ones,
    /// Serialised as `{"ScalarBits": u32}`, its `f32::to_bits`: JSON has no NaN or
    /// infinity, and bits are exact.
    #[serde(rename = "ScalarBits", with = "f32_bits")]
    Scalar(f32),
}

/// An f32 as its bits, for [`ConstValue::Scalar`].
mod f32_bits {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(x.to_bits())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        u32::deserialize(d).map(f32::from_bits)
    }
}

/// Integer operations on state fields (predicates and state updates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IntOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl IntOp {
    pub fn symbol(self) -> &'static str {
        match self {
            IntOp::Add => "+",
            IntOp::Sub => "-",
            IntOp::Mul => "*",
            IntOp::Div => "/",
            IntOp::Rem => "%",
            IntOp::Eq => "==",
            IntOp::Ne => "!=",
            IntOp::Lt => "<",
            IntOp::Le => "<=",
            IntOp::Gt => ">",
            IntOp::Ge => ">=",
            IntOp::And => "&&",
            IntOp::Or => "||",
        }
    }
}

/// An integer expression over state fields and the instance's data, evaluated where it
/// is used (a predicate, an embedding index, a label). Ints are never payloads: they are
/// either state fields (loop counters) or read from the instance on demand, so all
/// messages of one dynamic context carry identical states. Booleans are 0 and 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateExpr {
    Field(FieldId),
    Const(i64),
    /// An int leaf of the instance's data, e.g. `x.tokens[t]`.
    Data(Vec<DataStep>),
    /// The length of a sequence of the instance's data, e.g. `len(x.tokens)`.
    Len(Vec<DataStep>),
    Not(Box<StateExpr>),
    Bin(IntOp, Box<StateExpr>, Box<StateExpr>),
}

/// Read access to the instance being processed, for evaluating [`StateExpr`]s.
pub trait InstanceData {
    /// The int at `path`, or `None` when the path does not lead to an int.
    fn int_at(&self, path: &[ResolvedStep]) -> Option<i64>;
    /// The length of the sequence at `path`.
    fn len_at(&self, path: &[ResolvedStep]) -> Option<i64>;
}

/// A data step with its index evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolvedStep<'a> {
    Field(&'a str),
    Index(i64),
    /// The enum value here is of this variant (see [`DataStep::Variant`]).
    Variant(u32),
}

impl StateExpr {
    pub fn bin(op: IntOp, a: StateExpr, b: StateExpr) -> StateExpr {
        StateExpr::Bin(op, Box::new(a), Box::new(b))
    }

    /// Every state field the expression reads (data paths included).
    pub fn fields(&self, out: &mut Vec<FieldId>) {
        match self {
            StateExpr::Field(f) => out.push(*f),
            StateExpr::Const(_) => {}
            StateExpr::Data(path) | StateExpr::Len(path) => {
                for step in path {
                    if let DataStep::Index(e) = step {
                        e.fields(out);
                    }
                }
            }
            StateExpr::Not(e) => e.fields(out),
            StateExpr::Bin(_, a, b) => {
                a.fields(out);
                b.fields(out);
            }
        }
    }

    /// Evaluates on a state and the instance's data. A missing field or datum, division by
    /// zero and overflow give `None`.
    pub fn eval(&self, state: &[i64], data: &dyn InstanceData) -> Option<i64> {
        Some(match self {
            StateExpr::Field(f) => *state.get(f.0 as usize)?,
            StateExpr::Const(c) => *c,
            StateExpr::Data(path) => data.int_at(&resolve_path(path, state, data)?)?,
            StateExpr::Len(path) => data.len_at(&resolve_path(path, state, data)?)?,
            StateExpr::Not(e) => i64::from(e.eval(state, data)? == 0),
            StateExpr::Bin(op, a, b) => {
                let (x, y) = (a.eval(state, data)?, b.eval(state, data)?);
                match op {
                    IntOp::Add => x.checked_add(y)?,
                    IntOp::Sub => x.checked_sub(y)?,
                    IntOp::Mul => x.checked_mul(y)?,
                    IntOp::Div => x.checked_div(y)?,
                    IntOp::Rem => x.checked_rem(y)?,
                    IntOp::Eq => i64::from(x == y),
                    IntOp::Ne => i64::from(x != y),
                    IntOp::Lt => i64::from(x < y),
                    IntOp::Le => i64::from(x <= y),
                    IntOp::Gt => i64::from(x > y),
                    IntOp::Ge => i64::from(x >= y),
                    IntOp::And => i64::from(x != 0 && y != 0),
                    IntOp::Or => i64::from(x != 0 || y != 0),
                }
            }
        })
    }
}

impl StateExpr {
    /// Why [`StateExpr::eval`] gives `None` on this state and data, for error messages:
    /// the innermost part that fails (a field not set, an index past the end of the data,
    /// a division by zero, an overflow). Recurses as deep as the expression, which the
    /// verifier bounds.
    pub fn eval_failure(&self, state: &[i64], data: &dyn InstanceData) -> String {
        match self {
            StateExpr::Field(f) => format!("state field #{} is not set", f.0),
            StateExpr::Const(_) => "a constant cannot fail (internal)".to_string(),
            StateExpr::Data(path) | StateExpr::Len(path) => {
                for step in path {
                    if let DataStep::Index(e) = step {
                        if e.eval(state, data).is_none() {
                            return e.eval_failure(state, data);
                        }
                    }
                }
                path_failure(path, state, data, matches!(self, StateExpr::Len(_)))
            }
            StateExpr::Not(e) => e.eval_failure(state, data),
            StateExpr::Bin(op, a, b) => match (a.eval(state, data), b.eval(state, data)) {
                (None, _) => a.eval_failure(state, data),
                (_, None) => b.eval_failure(state, data),
                (Some(_), Some(0)) if matches!(op, IntOp::Div | IntOp::Rem) => "division by zero".to_string(),
                (Some(x), Some(y)) => format!("{x} {} {y} overflows a 64-bit int", op.symbol()),
            },
        }
    }
}

/// Where a resolved data path stops leading anywhere: the longest prefix that does.
fn path_failure(path: &[DataStep], state: &[i64], data: &dyn InstanceData, wants_sequence: bool) -> String {
    let Some(resolved) = resolve_path(path, state, data) else {
        return "an index of the data path cannot be evaluated".to_string();
    };
    let spell = |steps: &[ResolvedStep]| {
        let mut out = String::new();
        for step in steps {
            match step {
                ResolvedStep::Field(name) if out.is_empty() => out.push_str(name),
                ResolvedStep::Field(name) => out.push_str(&format!(".{name}")),
                ResolvedStep::Index(i) => out.push_str(&format!("[{i}]")),
                ResolvedStep::Variant(v) => out.push_str(&format!("{{{v}}}")),
            }
        }
        out
    };
    for k in (0..resolved.len()).rev() {
        let prefix = &resolved[..k];
        if let (Some(len), Some(ResolvedStep::Index(i))) = (data.len_at(prefix), resolved.get(k)) {
            if *i < 0 || *i >= len {
                return format!("index {i} is outside `{}`, which has {len} elements", spell(prefix));
            }
        }
    }
    let want = if wants_sequence { "a sequence" } else { "an int" };
    format!("the instance has no {want} at `{}`", spell(&resolved))
}

/// Evaluates the indices of a data path.
pub fn resolve_path<'a>(path: &'a [DataStep], state: &[i64], data: &dyn InstanceData) -> Option<Vec<ResolvedStep<'a>>> {
    path.iter()
        .map(|step| match step {
            DataStep::Field(name) => Some(ResolvedStep::Field(name)),
            DataStep::Index(e) => Some(ResolvedStep::Index(e.eval(state, data)?)),
            DataStep::Variant(v) => Some(ResolvedStep::Variant(*v)),
        })
        .collect()
}

/// One step of a path into the instance's data, from the instance record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataStep {
    /// A record field, by name.
    Field(String),
    /// A sequence element at an index computed from the state (and data).
    Index(Box<StateExpr>),
    /// The enum value (or tree node) here is of variant `k` (its index in the enum): the
    /// path leads nowhere on a value of another variant. The lowering puts it before a
    /// field that a `match` arm binds, so that a variant's field is told from another
    /// variant's field of the same name (each may have its own range, `amp_data::ranges`).
    /// Text form `{k}`: `$.prog[%i]{1}.op`.
    Variant(u32),
}

/// How a reduction combines the rows of a batch (or the elements of a tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceFn {
    Sum,
    Mean,
}

/// An int computed from a payload (non-differentiable), written into the state by
/// `state_from_payload`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PayloadInt {
    /// The index of the largest element (the lowest index among ties).
    Argmax,
    /// The index of the `slot`-th largest element among the top `k` (ties: lower index
    /// first), as `top_k` orders them.
    TopK { k: u32, slot: StateExpr },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LossKind {
    /// Cross-entropy of logits against the class the expression gives (e.g. `x.label`).
    CrossEntropy { label: StateExpr },
    /// Cross-entropy against `label` divided by `count`: one term of the mean of an
    /// instance's `count` losses (a rolled-out network's loss is the mean over its frames,
    /// and an instance's loss is the sum of what its loss nodes report).
    CrossEntropyMean { label: StateExpr, count: StateExpr },
    /// Mean squared error between the two inputs.
    Mse,
    /// One term of a loss that is a weighted sum of terms (losses computed in loops, maps,
    /// arms and recursion, and terms computed from tensors): `weight · base`, divided by
    /// `count` when there is one. `judge`: the cross-entropy's verdict counts towards
    /// accuracy where this evaluates non-zero (none: never).
    Term { base: LossBase, weight: f32, count: Option<StateExpr>, judge: Option<StateExpr> },
}

/// What a [`LossKind::Term`] weighs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LossBase {
    /// Cross-entropy of the logits against `label`.
    CrossEntropy { label: StateExpr },
    /// Mean squared error between the two inputs.
    Mse,
    /// The input itself, an `f32[]` computed from tensors (e.g. a load-balancing term).
    Scalar,
}

impl LossKind {
    /// The state expressions the loss evaluates (label, count, judge).
    pub fn exprs(&self) -> impl Iterator<Item = &StateExpr> {
        let (a, b, c) = match self {
            LossKind::CrossEntropy { label } => (Some(label), None, None),
            LossKind::CrossEntropyMean { label, count } => (Some(label), Some(count), None),
            LossKind::Mse => (None, None, None),
            LossKind::Term { base, count, judge, .. } => {
                let label = match base {
                    LossBase::CrossEntropy { label } => Some(label),
                    _ => None,
                };
                (label, count.as_ref(), judge.as_ref())
            }
        };
        [a, b, c].into_iter().flatten()
    }

    /// The class label a cross-entropy loss reads.
    pub fn label(&self) -> Option<&StateExpr> {
        match self {
            LossKind::CrossEntropy { label }
            | LossKind::CrossEntropyMean { label, .. }
            | LossKind::Term { base: LossBase::CrossEntropy { label }, .. } => Some(label),
            _ => None,
        }
    }
}

/// What a node does. Ports and semantics per op are in `docs/IR.md`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    Source,
    /// Reads an f32 leaf (a tensor or a scalar) of the instance's data into the payload.
    Read {
        path: Vec<DataStep>,
    },
    Const {
        value: ConstValue,
    },
    /// A parameterized payload transform with `param.weight` `[out, in]` and `param.bias`.
    Linear {
        param: String,
    },
    /// A lookup of row `index` (evaluated on the state and data) of `param.weight`.
    Embedding {
        param: String,
        index: StateExpr,
    },
    /// `count` rows of `param.weight` as one batch `f32[?, dim]`: output row `r` is table
    /// row `index` evaluated with `field` = r (a batched map's `emb(k)`, every element at
    /// once). Backward adds each row's gradient into its table row's (an index-add).
    EmbeddingRows {
        param: String,
        field: FieldId,
        index: StateExpr,
        count: StateExpr,
    },
    /// An elementwise affine map along the last dimension, `x * param.weight +
    /// param.bias` with both `[d]`: a LayerNorm's learned scale and shift.
    Affine {
        param: String,
    },
    Unary(UnaryFn),
    Binary(BinaryFn),
    Concat,
    Split {
        parts: u32,
    },
    Forget,
    /// Routes to output 0 when the predicate holds, else to output 1.
    Cond {
        pred: StateExpr,
    },
    /// Routes to output `index` (evaluated on the state and data), e.g. a variant tag or
    /// the element of a parameter array.
    Switch {
        index: StateExpr,
        arms: u32,
    },
    Phi {
        arms: u32,
    },
    /// Writes `field := value`; backward restores it with `inverse` when given, else from
    /// its cache.
    Isu {
        field: FieldId,
        value: StateExpr,
        inverse: Option<StateExpr>,
    },
    Loss(LossKind),
    /// The named result leaves the graph (inference output).
    Sink {
        name: String,
    },
    /// One message in, `count` out with `field` = 0..count (an element context opens);
    /// the payload is shared. Backward sums the `count` gradients.
    Flatmap {
        field: FieldId,
        count: StateExpr,
    },
    /// Joins the `count` element messages of a context (input 0, ordered by `field`) into
    /// one batch `f32[?, d]`; input 1 is the enclosing context's control message, so an
    /// empty collection still gives a (zero-row) batch. The output has `field` unset.
    Group {
        field: FieldId,
        count: StateExpr,
    },
    /// A batch in, one message per row out with `field` = the row.
    Ungroup {
        field: FieldId,
    },
    /// Row `index` of a batch or of a tensor's leading dimension.
    Gather {
        index: StateExpr,
    },
    /// `f32[?, d] -> f32[?, d]` with `count` rows: row `i` of the input (with `field` = i
    /// while `index` is evaluated) is added into row `index`.
    ScatterSum {
        field: FieldId,
        index: StateExpr,
        count: StateExpr,
    },
    /// `f32[?, d] -> f32[?, d]` with `count` rows: output row `r` is input row `index`
    /// evaluated with `field` = r (a batched map's `xs[e.src]`, every element at once).
    /// Backward adds each output row's gradient into its source row.
    GatherRows {
        field: FieldId,
        index: StateExpr,
        count: StateExpr,
    },
    /// `f32[?, d] -> f32[?, d]`: row `r` passes where `pred` (with `field` = r) holds and is
    /// zero elsewhere (a batched map's parameter-array call `msg[e.kind](x)`: every arm runs
    /// on all rows, each keeps its own). Backward masks the gradient the same way.
    MaskRows {
        field: FieldId,
        pred: StateExpr,
    },
    /// `f32[?, d]` in, `arms` outputs `f32[?, d]`: output `k` holds the input rows `r` whose
    /// `index` (with `field` = r) is `k`, in input order (a batched map's parameter-array
    /// call `msg[e.kind](x)`: each arm runs on its own rows only). An index outside
    /// `0..arms` is an error. Backward puts each arm's gradient rows back in their places.
    PartitionRows {
        field: FieldId,
        index: StateExpr,
        arms: u32,
    },
    /// `arms` inputs `f32[?, d]`, one output with the rows of all of them: output row `r`
    /// is the next unused row of input `index` (with `field` = r); the inverse of the
    /// `partition_rows` with the same index. Backward partitions the gradient the same way.
    MergeRows {
        field: FieldId,
        index: StateExpr,
        arms: u32,
    },
    /// Sums or averages the rows of a batch, or the elements of a tensor.
    Reduce(ReduceFn),
    /// The `k` largest elements of a vector, largest first.
    TopK {
        k: u32,
    },
    /// Input 0 is a vector the int is computed from (it gets a zero gradient), input 1 the
    /// value passed through with `field := int`.
    StateFromPayload {
        field: FieldId,
        int: PayloadInt,
    },
    /// Inverted dropout at rate `rate` (in `[0, 1)`): in training each element is zeroed
    /// or scaled by `1 / (1 - rate)`, by a mask that `dropout::mask` computes from the
    /// run, `site` (where the call is written, `dropout::site`) and the values of the
    /// `context` fields (the call's dynamic context: loop counters, elements, tree nodes,
    /// outermost first), which the node reads from the message's state in both directions
    /// (so it caches nothing); the identity elsewhere.
    Dropout {
        #[serde(with = "f32_bits")]
        rate: f32,
        site: u64,
        context: Vec<FieldId>,
    },
}

impl Op {
    /// The op's keyword in the text form.
    pub fn keyword(&self) -> &'static str {
        match self {
            Op::Source => "source",
            Op::Read { .. } => "read",
            Op::Const { .. } => "const",
            Op::Linear { .. } => "linear",
            Op::Embedding { .. } => "embedding",
            Op::EmbeddingRows { .. } => "embedding_rows",
            Op::Affine { .. } => "affine",
            Op::Unary(_) => "unary",
            Op::Binary(_) => "binary",
            Op::Concat => "concat",
            Op::Split { .. } => "split",
            Op::Forget => "forget",
            Op::Cond { .. } => "cond",
            Op::Switch { .. } => "switch",
            Op::Phi { .. } => "phi",
            Op::Isu { .. } => "isu",
            Op::Loss(_) => "loss",
            Op::Sink { .. } => "sink",
            Op::Flatmap { .. } => "flatmap",
            Op::Group { .. } => "group",
            Op::Ungroup { .. } => "ungroup",
            Op::Gather { .. } => "gather",
            Op::ScatterSum { .. } => "scatter_sum",
            Op::GatherRows { .. } => "gather_rows",
            Op::MaskRows { .. } => "mask_rows",
            Op::PartitionRows { .. } => "partition_rows",
            Op::MergeRows { .. } => "merge_rows",
            Op::Reduce(_) => "reduce",
            Op::TopK { .. } => "top_k",
            Op::StateFromPayload { .. } => "state_from_payload",
            Op::Dropout { .. } => "dropout",
        }
    }

    /// The state fields the op reads and writes through its own attributes (sorted,
    /// without repeats): what a node's `reads` and `writes` must list.
    pub fn state_fields(&self) -> (Vec<FieldId>, Vec<FieldId>) {
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        match self {
            Op::Source => writes.push(FieldId(0)),
            Op::Read { path } => StateExpr::Data(path.clone()).fields(&mut reads),
            Op::Embedding { index, .. } | Op::Switch { index, .. } => index.fields(&mut reads),
            Op::Cond { pred } => pred.fields(&mut reads),
            Op::Isu { field, value, inverse } => {
                value.fields(&mut reads);
                if let Some(inverse) = inverse {
                    inverse.fields(&mut reads);
                }
                writes.push(*field);
            }
            Op::Loss(kind) => kind.exprs().for_each(|e| e.fields(&mut reads)),
            Op::Flatmap { field, count } | Op::Group { field, count } => {
                count.fields(&mut reads);
                writes.push(*field);
            }
            Op::Ungroup { field } => writes.push(*field),
            Op::Gather { index } => index.fields(&mut reads),
            Op::ScatterSum { field, index, count }
            | Op::GatherRows { field, index, count }
            | Op::EmbeddingRows { field, index, count, .. } => {
                index.fields(&mut reads);
                // The row field is bound by the op while `index` is evaluated, not read.
                reads.retain(|f| f != field);
                count.fields(&mut reads);
            }
            Op::MaskRows { field, pred }
            | Op::PartitionRows { field, index: pred, .. }
            | Op::MergeRows { field, index: pred, .. } => {
                pred.fields(&mut reads);
                reads.retain(|f| f != field);
            }
            Op::StateFromPayload { field, int } => {
                if let PayloadInt::TopK { slot, .. } = int {
                    slot.fields(&mut reads);
                }
                writes.push(*field);
            }
            Op::Dropout { context, .. } => reads.extend(context.iter().copied()),
            _ => {}
        }
        reads.sort();
        reads.dedup();
        (reads, writes)
    }

    /// Every state field the op names in its attributes, read, written or bound (with
    /// repeats): what a loader checks against the state's length.
    pub fn named_fields(&self, out: &mut Vec<FieldId>) {
        match self {
            // A read path's indices are expressions; `Len` of the same path visits them all.
            Op::Read { path } => StateExpr::Len(path.clone()).fields(out),
            Op::Embedding { index, .. } | Op::Switch { index, .. } | Op::Gather { index } => index.fields(out),
            Op::Cond { pred } => pred.fields(out),
            Op::Isu { field, value, inverse } => {
                out.push(*field);
                value.fields(out);
                if let Some(inverse) = inverse {
                    inverse.fields(out);
                }
            }
            Op::Loss(kind) => kind.exprs().for_each(|e| e.fields(out)),
            Op::Flatmap { field, count } | Op::Group { field, count } => {
                out.push(*field);
                count.fields(out);
            }
            Op::Ungroup { field } => out.push(*field),
            Op::ScatterSum { field, index, count }
            | Op::GatherRows { field, index, count }
            | Op::EmbeddingRows { field, index, count, .. } => {
                out.push(*field);
                index.fields(out);
                count.fields(out);
            }
            Op::MaskRows { field, pred }
            | Op::PartitionRows { field, index: pred, .. }
            | Op::MergeRows { field, index: pred, .. } => {
                out.push(*field);
                pred.fields(out);
            }
            Op::StateFromPayload { field, int } => {
                out.push(*field);
                if let PayloadInt::TopK { slot, .. } = int {
                    slot.fields(out);
                }
            }
            Op::Dropout { context, .. } => out.extend(context.iter().copied()),
            _ => {}
        }
    }

    /// Parameterized payload transforms (they own parameters and accumulate gradients).
    pub fn is_ppt(&self) -> bool {
        matches!(self, Op::Linear { .. } | Op::Embedding { .. } | Op::EmbeddingRows { .. } | Op::Affine { .. })
    }
}

/// Where a node came from in the source: file index into `Graph::files`, byte range and
/// the 1-based line and column of its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loc {
    pub file: u32,
    pub start: u32,
    pub end: u32,
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub op: Op,
    /// Payload type of each input port.
    pub inputs: Vec<PayloadTy>,
    /// Payload type of each output port.
    pub outputs: Vec<PayloadTy>,
    /// State fields the node reads and writes.
    pub reads: Vec<FieldId>,
    pub writes: Vec<FieldId>,
    /// The keying function: the state fields under which the node caches what its
    /// backward pass needs. Empty when it caches nothing.
    pub key: Vec<FieldId>,
    /// A short human name (`cell`, `h`), not necessarily unique.
    pub label: String,
    pub loc: Option<Loc>,
    /// Fusion group assigned by the NPPT fusion pass (`None` when not fused).
    pub fusion: Option<u32>,
}

impl Node {
    /// The state fields under which the gradients that come back to one of its fanned-out
    /// output ports are summed (the executor's fan-in, whose grouping the planner's model
    /// of routing chains follows): its key and the fields it writes, sorted, without
    /// repeats; the instance field (0) alone when both are empty.
    pub fn fan_in_key(&self) -> Vec<FieldId> {
        let mut key: Vec<FieldId> = self.key.iter().chain(&self.writes).copied().collect();
        if key.is_empty() {
            key.push(FieldId(0));
        }
        key.sort_unstable();
        key.dedup();
        key
    }
}

/// An edge from output port `from_port` of its source to input port `to_port` of its
/// target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Edge {
    pub from_port: u16,
    pub to_port: u16,
}

/// A whole model: state schema, parameters, and the node graph.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The model's name.
    pub name: String,
    /// Source file names that `Loc::file` indexes.
    pub files: Vec<String>,
    pub state: Vec<StateField>,
    /// The type of an instance (what data paths walk); `None` for hand-built graphs that
    /// read no data.
    pub input: Option<Schema>,
    pub params: Vec<Param>,
    pub nodes: StableGraph<Node, Edge>,
    /// Free-form facts: hyperparameter values, the input record's name.
    pub meta: BTreeMap<String, String>,
}

impl Graph {
    pub fn field(&self, id: FieldId) -> Option<&StateField> {
        self.state.get(id.0 as usize)
    }

    pub fn field_named(&self, name: &str) -> Option<FieldId> {
        self.state.iter().position(|f| f.name == name).map(|i| FieldId(i as u16))
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The inference output: the sink named `forward`, else the first sink (what `infer`
    /// returns and what the executor reports as an instance's output).
    pub fn main_sink(&self) -> Option<NodeIndex> {
        let sinks = || {
            self.nodes.node_indices().filter_map(|i| match &self.nodes[i].op {
                Op::Sink { name } => Some((i, name.as_str())),
                _ => None,
            })
        };
        sinks().find(|&(_, name)| name == "forward").or_else(|| sinks().next()).map(|(i, _)| i)
    }

    /// Per node index (holes `false`), whether the node's output depends on a parameter
    /// through inputs that carry gradients back: a Ppt's does, and so does that of any
    /// node reading such an output through a differentiable port (every port but the
    /// routing input of a `state_from_payload`, whose backward sends zeros there). A
    /// gradient sent back to an output that does not depend on one (a data read's, or
    /// what only data and routing decisions feed) reaches no parameter, whatever its
    /// values: the executor skips computing it, the planner's cost model its work.
    pub fn parameter_dependent(&self) -> Vec<bool> {
        use petgraph::visit::EdgeRef;
        use petgraph::visit::NodeIndexable;
        let mut dependent = vec![false; self.nodes.node_bound()];
        let mut work: Vec<NodeIndex> =
            self.nodes.node_indices().filter(|&i| self.nodes.node_weight(i).is_some_and(|n| n.op.is_ppt())).collect();
        work.iter().for_each(|i| dependent[i.index()] = true);
        while let Some(index) = work.pop() {
            for edge in self.nodes.edges_directed(index, petgraph::Direction::Outgoing) {
                let target = edge.target();
                let Some(node) = self.nodes.node_weight(target) else { continue };
                let routing_only = matches!(node.op, Op::StateFromPayload { .. }) && edge.weight().to_port == 0;
                // A function the vocabulary marks non-differentiable sends no gradient back.
                let opaque = matches!(node.op, Op::Unary(f) if !f.spec().differentiable);
                if !routing_only && !opaque && !dependent[target.index()] {
                    dependent[target.index()] = true;
                    work.push(target);
                }
            }
        }
        dependent
    }

    /// The edge feeding input port `port` of `node`, with its source node.
    /// The edge into each input port of `node` (`None` where unconnected), in one pass over
    /// its incoming edges: a `phi` with one port per expert would make `input_edge` per
    /// port quadratic.
    pub fn input_edges(&self, node: NodeIndex) -> Vec<Option<(NodeIndex, Edge)>> {
        use petgraph::visit::EdgeRef;
        let ports = self.nodes.node_weight(node).map_or(0, |n| n.inputs.len());
        let mut out = vec![None; ports];
        for e in self.nodes.edges_directed(node, petgraph::Direction::Incoming) {
            if let Some(slot) = out.get_mut(usize::from(e.weight().to_port)) {
                slot.get_or_insert((e.source(), *e.weight()));
            }
        }
        out
    }

    /// Whether some output port of `node` feeds two or more edges.
    pub fn fans_out(&self, node: NodeIndex) -> bool {
        let mut seen = std::collections::HashSet::new();
        self.nodes
            .edges_directed(node, petgraph::Direction::Outgoing)
            .any(|e| !seen.insert(petgraph::visit::EdgeRef::weight(&e).from_port))
    }

    pub fn input_edge(&self, node: NodeIndex, port: u16) -> Option<(NodeIndex, Edge)> {
        use petgraph::visit::EdgeRef;
        self.nodes
            .edges_directed(node, petgraph::Direction::Incoming)
            .find(|e| e.weight().to_port == port)
            .map(|e| (e.source(), *e.weight()))
    }
}
