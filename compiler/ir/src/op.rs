//! What a node does: `Op`, with the payload ints and losses it takes.

use crate::values::f32_bits;
use crate::{BinaryFn, ConstValue, DataStep, FieldId, ReduceFn, StateExpr, UnaryFn};
use serde::{Deserialize, Serialize};

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

    /// The parameter group (the prefix of `{param}.weight`, `{param}.bias`) a
    /// parameterized payload transform reads and updates; `None` for every other op.
    /// Every stage that asks which nodes own parameters asks here, so a new Ppt cannot be
    /// left out of one of them.
    pub fn param(&self) -> Option<&str> {
        match self {
            Op::Linear { param }
            | Op::Embedding { param, .. }
            | Op::EmbeddingRows { param, .. }
            | Op::Affine { param } => Some(param),
            _ => None,
        }
    }

    /// The tensors of the group [`Op::param`] names: `{param}.weight`, and `{param}.bias`
    /// but for an Embedding's table. Empty for an op without parameters.
    pub fn param_tensors(&self) -> Vec<String> {
        let Some(param) = self.param() else { return Vec::new() };
        let mut names = vec![format!("{param}.weight")];
        if !self.is_lookup() {
            names.push(format!("{param}.bias"));
        }
        names
    }

    /// An Embedding's lookup of table rows (one row, or a batch of them).
    pub fn is_lookup(&self) -> bool {
        matches!(self, Op::Embedding { .. } | Op::EmbeddingRows { .. })
    }

    /// Parameterized payload transforms (they own parameters and accumulate gradients).
    pub fn is_ppt(&self) -> bool {
        self.param().is_some()
    }
}
