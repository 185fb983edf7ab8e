//! The ranges a model puts on the ints of its data: an Embedding index below the table's
//! rows, a cross-entropy label below the classes, a `switch` index below its arms (and
//! the index of a batched map's parameter-array call below the arms its `mask_rows`
//! nodes keep: `X == 0`, ..., `X == n - 1`, where a row outside would be zeros). The
//! loaders know only the schema (an `int` is any int); these come from the graph, so that
//! a label of 2 for a model of 2 classes is bad data at file:line:field before training,
//! not a node error mid-epoch that names no field (and `--skip-bad-data` skips it).
//! A loss the model itself guards, `if label < k { cross_entropy(y, label) } else { .. }`
//! with `k` at most the classes, takes labels past the classes on purpose (they mark
//! nodes without a loss, e.g. SST's neutral phrases in the binary task), so its label
//! gets no range.

use crate::instance::Instance;
use amp_ir::{DataStep, Graph, IntOp, Op, PayloadTy, StateExpr};

/// One step of a ranged path: a field, every element of a sequence (or every node of a
/// tree), one element, or only a value of one variant of an enum (the field after it is
/// that variant's: two variants' fields of the same name have ranges of their own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeStep {
    Field(String),
    Each,
    At(i64),
    Variant(u32),
}

/// Every int at `path` must be in `0..limit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub path: Vec<RangeStep>,
    pub limit: i64,
    /// What the int is, for messages: "an index of the Embedding `emb` (3 rows)".
    pub what: String,
}

/// The ranges of `graph`'s data reads. A read whose index is computed (`x.tokens[i + 1]`)
/// puts no range on the data: which elements it reads depends on the run. An index that
/// is a loop's counter or a collection's element reads every element, so every element
/// must be in range.
pub fn model_ranges(graph: &Graph) -> Vec<Range> {
    let mut out: Vec<Range> = Vec::new();
    // The arms the masks of one index keep: `index == k` for k below the count.
    let mut masks: Vec<(&StateExpr, u64, String)> = Vec::new();
    for node in graph.nodes.node_weights() {
        if let Op::MaskRows { pred: StateExpr::Bin(IntOp::Eq, index, arm), .. } = &node.op {
            let StateExpr::Const(k) = arm.as_ref() else { continue };
            let Ok(arms) = u64::try_from(*k + 1) else { continue };
            match masks.iter_mut().find(|(e, _, _)| *e == index.as_ref()) {
                Some(entry) => entry.1 = entry.1.max(arms),
                None => masks.push((index, arms, node.label.clone())),
            }
        }
    }
    let masked =
        masks.into_iter().map(|(index, arms, label)| (index, arms, format!("a choice of `{label}` ({arms} arms)")));
    let nodes = graph.nodes.node_indices().filter_map(|at| {
        let node = &graph.nodes[at];
        let (expr, limit, what) = match &node.op {
            Op::Embedding { param, index } | Op::EmbeddingRows { param, index, .. } => {
                let rows = graph.param(&format!("{param}.weight")).and_then(|p| p.shape.first().copied());
                let rows = rows?;
                (index, rows, format!("an index of the Embedding `{param}` ({rows} rows)"))
            }
            Op::Loss(kind) if kind.label().is_some() => {
                let label = kind.label()?;
                let classes = match node.inputs.first() {
                    Some(PayloadTy::F32(dims)) => dims.last().copied(),
                    _ => None,
                };
                let classes = classes?;
                // What feeds the prediction: the source node's op and output port.
                let feed = graph.input_edges(at).first().copied().flatten();
                let feed =
                    feed.and_then(|(source, edge)| graph.nodes.node_weight(source).map(|n| (&n.op, edge.from_port)));
                if guarded_below(feed, label, classes) {
                    return None;
                }
                (label, classes, format!("a class label of the loss `{}` ({classes} classes)", node.label))
            }
            Op::Switch { index, arms } | Op::PartitionRows { index, arms, .. } => {
                (index, u64::from(*arms), format!("a choice of `{}` ({arms} arms)", node.label))
            }
            _ => return None,
        };
        Some((expr, limit, what))
    });
    for (expr, limit, what) in nodes.collect::<Vec<_>>().into_iter().chain(masked) {
        let (Some(path), Ok(limit)) = (ranged_path(expr), i64::try_from(limit)) else { continue };
        if !out.iter().any(|r| r.path == path && r.limit <= limit) {
            out.retain(|r| !(r.path == path && r.limit > limit));
            out.push(Range { path, limit, what });
        }
    }
    out
}

/// Whether a loss whose prediction comes from `feed` (op, output port) runs only on the
/// taken side of a `cond` on `label < k` (or `label <= k - 1`) with `k <= classes`: the
/// lowering routes an `if`'s values through its `cond`, so a guarded loss's prediction
/// comes straight from the cond's output 0.
fn guarded_below(feed: Option<(&Op, u16)>, label: &StateExpr, classes: u64) -> bool {
    let Some((Op::Cond { pred: StateExpr::Bin(op, read, bound) }, port)) = feed else { return false };
    let bound = match (op, bound.as_ref()) {
        (IntOp::Lt, StateExpr::Const(k)) => Some(*k),
        (IntOp::Le, StateExpr::Const(k)) => k.checked_add(1),
        _ => None,
    };
    port == 0 && read.as_ref() == label && bound.is_some_and(|k| u64::try_from(k).is_ok_and(|k| k <= classes))
}

fn ranged_path(expr: &StateExpr) -> Option<Vec<RangeStep>> {
    let StateExpr::Data(steps) = expr else { return None };
    steps
        .iter()
        .map(|step| match step {
            DataStep::Field(name) => Some(RangeStep::Field(name.clone())),
            DataStep::Variant(k) => Some(RangeStep::Variant(*k)),
            DataStep::Index(index) => match index.as_ref() {
                StateExpr::Const(k) => Some(RangeStep::At(*k)),
                StateExpr::Field(_) => Some(RangeStep::Each),
                _ => None,
            },
        })
        .collect()
}

/// The first int of `instance` outside one of `ranges`: the field's path (`nodes[3]`,
/// `tree[5].word`), its value, and the range it breaks.
pub fn first_out_of_range<'r>(instance: &Instance, ranges: &'r [Range]) -> Option<(String, i64, &'r Range)> {
    ranges.iter().find_map(|range| {
        let mut found = None;
        instance.each_int(&range.path, &mut |field, value| {
            if (0..range.limit).contains(&value) {
                true
            } else {
                found = Some((field.to_string(), value));
                false
            }
        });
        found.map(|(field, value)| (field, value, range))
    })
}
