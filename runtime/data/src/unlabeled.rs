//! Instances without their labels, for inference (`amprun infer`): the fields of the input
//! schema that only the loss reads may be absent from the data.
//!
//! Which fields those are comes from the graph: a field is *forward* when a node the
//! forward output (the sink named `forward`, else the first sink) depends on reads it, in
//! a data path of its op (a `read`, an index, a predicate, a count); every other field is a
//! *label*, read only by other nodes (the losses, and what feeds only them) or by none:
//! `label` of `record Example { tokens: [int], label: int }`, every tree node's `label` in
//! SST's trees, an `mse` target read into the payload. A label field that has no default
//! (an enum, such as a tree's children) stays required.
//!
//! [`Unlabeled::reduced`] is the input schema without the label fields: the loaders read
//! the data with it (so the labels need not be there), and [`Unlabeled::fill`] puts each
//! label back as its type's zero (0, false, zeros, an empty sequence), which the forward
//! computation never reads, so that the instance fits the graph's schema.

use crate::{DataError, Tensor, Value};
use amp_ir::{DataStep, DataTy, Graph, Op, Schema, StateExpr};

/// The record or enum variant a field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    Record(u32),
    Variant(u32, u32),
}

/// The label fields of a graph's input schema and the schema without them.
#[derive(Clone, Debug, PartialEq)]
pub struct Unlabeled {
    full: Schema,
    reduced: Schema,
    /// `(owner, index in the full field list)`, sorted.
    labels: Vec<(Owner, usize)>,
}

impl Unlabeled {
    /// The label fields of `graph`'s input; `None` when it has no input schema.
    pub fn of_graph(graph: &Graph) -> Option<Unlabeled> {
        let full = graph.input.clone()?;
        let forward = forward_nodes(graph);
        let mut forward_fields = Vec::new();
        for index in graph.nodes.node_indices() {
            let Some(node) = graph.nodes.node_weight(index) else { continue };
            if forward.get(index.index()).copied().unwrap_or(false) {
                for path in data_paths(&node.op) {
                    mark(&full, path, &mut forward_fields);
                }
            }
        }
        // Every field the forward does not read: the losses' and those nothing reads (a
        // record's `label` beside trees whose nodes carry the labels).
        let records = full
            .records
            .iter()
            .enumerate()
            .flat_map(|(r, record)| (0..record.fields.len()).map(move |i| (Owner::Record(r as u32), i)));
        let variants = full.enums.iter().enumerate().flat_map(|(e, enumeration)| {
            enumeration.variants.iter().enumerate().flat_map(move |(v, variant)| {
                (0..variant.fields.len()).map(move |i| (Owner::Variant(e as u32, v as u32), i))
            })
        });
        let labels: Vec<(Owner, usize)> = records
            .chain(variants)
            .filter(|f| !forward_fields.contains(f))
            .filter(|&(owner, i)| field_type(&full, owner, i).is_some_and(|ty| zero(&full, ty, 0).is_some()))
            .collect();
        Some(Unlabeled::new(full, labels))
    }

    /// The schema without `labels`.
    fn new(full: Schema, mut labels: Vec<(Owner, usize)>) -> Unlabeled {
        labels.sort();
        labels.dedup();
        let mut reduced = full.clone();
        for (r, record) in reduced.records.iter_mut().enumerate() {
            let mut i = 0;
            record.fields.retain(|_| {
                i += 1;
                !labels.contains(&(Owner::Record(r as u32), i - 1))
            });
        }
        for (e, enumeration) in reduced.enums.iter_mut().enumerate() {
            for (v, variant) in enumeration.variants.iter_mut().enumerate() {
                let mut i = 0;
                variant.fields.retain(|_| {
                    i += 1;
                    !labels.contains(&(Owner::Variant(e as u32, v as u32), i - 1))
                });
            }
        }
        Unlabeled { full, reduced, labels }
    }

    /// The input schema without the label fields.
    pub fn reduced(&self) -> &Schema {
        &self.reduced
    }

    /// The label fields as `Record.field` or `Enum::Variant.field`, for messages and docs.
    pub fn label_names(&self) -> Vec<String> {
        self.labels
            .iter()
            .filter_map(|&(owner, i)| match owner {
                Owner::Record(r) => {
                    let record = self.full.records.get(r as usize)?;
                    Some(format!("{}.{}", record.name, record.fields.get(i)?.name))
                }
                Owner::Variant(e, v) => {
                    let enumeration = self.full.enums.get(e as usize)?;
                    let variant = enumeration.variants.get(v as usize)?;
                    Some(format!("{}::{}.{}", enumeration.name, variant.name, variant.fields.get(i)?.name))
                }
            })
            .collect()
    }

    /// The names of the label fields (`label`), which a JSON object may still carry.
    pub fn field_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.labels.iter().filter_map(|&(owner, i)| field_name(&self.full, owner, i)).map(str::to_string).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether the graph has label fields at all.
    pub fn has_labels(&self) -> bool {
        !self.labels.is_empty()
    }

    /// An instance of the reduced schema as one of the full schema: every label field put
    /// back as its type's zero.
    pub fn fill(&self, value: Value) -> Result<Value, DataError> {
        self.walk(value, &DataTy::Record(self.full.input), 0, false)
    }

    /// An instance of the full schema with every label replaced by its type's zero (data
    /// read with its labels, which inference ignores).
    pub fn clear(&self, value: Value) -> Result<Value, DataError> {
        self.walk(value, &DataTy::Record(self.full.input), 0, true)
    }

    /// Puts the zeros in: instead of the labels `given` has when `full`, else between the
    /// fields it has.
    fn walk(&self, value: Value, ty: &DataTy, depth: usize, full: bool) -> Result<Value, DataError> {
        if depth > MAX_DEPTH {
            return Err(DataError::new(crate::DataErrorKind::TooDeep { limit: MAX_DEPTH }));
        }
        Ok(match (ty, value) {
            (DataTy::Record(r), Value::Record(fields)) => {
                let schema = self.full.records.get(*r as usize).map_or(&[][..], |rec| &rec.fields[..]);
                Value::Record(self.fields(Owner::Record(*r), schema, fields, depth, full)?)
            }
            (DataTy::Enum(e), Value::Variant { tag, fields }) => {
                let variant = self.full.enums.get(*e as usize).and_then(|en| en.variants.get(tag as usize));
                let schema = variant.map_or(&[][..], |v| &v.fields[..]);
                Value::Variant { tag, fields: self.fields(Owner::Variant(*e, tag), schema, fields, depth, full)? }
            }
            (DataTy::Seq(t), Value::Seq(items)) => {
                Value::Seq(items.into_iter().map(|v| self.walk(v, t, depth + 1, full)).collect::<Result<_, _>>()?)
            }
            (DataTy::Tuple(ts), Value::Tuple(items)) => Value::Tuple(
                items.into_iter().zip(ts).map(|(v, t)| self.walk(v, t, depth + 1, full)).collect::<Result<_, _>>()?,
            ),
            (_, value) => value,
        })
    }

    fn fields(
        &self,
        owner: Owner,
        schema: &[amp_ir::FieldSchema],
        given: Vec<Value>,
        depth: usize,
        full: bool,
    ) -> Result<Vec<Value>, DataError> {
        let mut given = given.into_iter();
        let mut out = Vec::with_capacity(schema.len());
        for (i, field) in schema.iter().enumerate() {
            if self.labels.binary_search(&(owner, i)).is_ok() {
                if full {
                    given.next();
                }
                out.push(zero(&self.full, &field.ty, 0).ok_or_else(|| DataError::schema("a label without a zero"))?);
            } else {
                let value = given.next().ok_or_else(|| DataError::new(crate::DataErrorKind::MissingField))?;
                out.push(self.walk(value, &field.ty, depth + 1, full)?);
            }
        }
        Ok(out)
    }
}

/// Deeper than any loader builds (PTB trees: 1000, JSON: less).
const MAX_DEPTH: usize = 4096;

/// Per node index, whether the forward output depends on it (walking edges backwards
/// from the main sink: the one named `forward`, else the first).
fn forward_nodes(graph: &Graph) -> Vec<bool> {
    let bound = graph.nodes.node_indices().map(|i| i.index() + 1).max().unwrap_or(0);
    let mut seen = vec![false; bound];
    let Some(sink) = graph.main_sink().map(|i| i.index()) else { return seen };
    let mut inputs: Vec<Vec<usize>> = vec![Vec::new(); bound];
    for edge in graph.nodes.edge_indices() {
        if let Some((from, to)) = graph.nodes.edge_endpoints(edge) {
            inputs[to.index()].push(from.index());
        }
    }
    let mut stack = vec![sink];
    seen[sink] = true;
    while let Some(n) = stack.pop() {
        for &m in &inputs[n] {
            if !seen[m] {
                seen[m] = true;
                stack.push(m);
            }
        }
    }
    seen
}

/// Every data path an op reads (those inside indices included).
fn data_paths(op: &Op) -> Vec<&[DataStep]> {
    let mut exprs: Vec<&StateExpr> = Vec::new();
    let mut paths: Vec<&[DataStep]> = Vec::new();
    match op {
        Op::Read { path } => paths.push(path),
        Op::Embedding { index, .. } | Op::Switch { index, .. } | Op::Gather { index } => exprs.push(index),
        Op::Cond { pred } => exprs.push(pred),
        Op::Isu { value, inverse, .. } => exprs.extend(std::iter::once(value).chain(inverse)),
        Op::Loss(kind) => exprs.extend(kind.exprs()),
        Op::Flatmap { count, .. } | Op::Group { count, .. } => exprs.push(count),
        Op::ScatterSum { index, count, .. }
        | Op::GatherRows { index, count, .. }
        | Op::EmbeddingRows { index, count, .. } => exprs.extend([index, count]),
        Op::MaskRows { pred, .. } | Op::PartitionRows { index: pred, .. } | Op::MergeRows { index: pred, .. } => {
            exprs.push(pred)
        }
        Op::StateFromPayload { int: amp_ir::PayloadInt::TopK { slot, .. }, .. } => exprs.push(slot),
        _ => {}
    }
    for path in paths.clone() {
        steps_exprs(path, &mut exprs);
    }
    while let Some(expr) = exprs.pop() {
        match expr {
            StateExpr::Data(path) | StateExpr::Len(path) => {
                paths.push(path);
                steps_exprs(path, &mut exprs);
            }
            StateExpr::Not(e) => exprs.push(e),
            StateExpr::Bin(_, a, b) => exprs.extend([&**a, &**b]),
            StateExpr::Field(_) | StateExpr::Const(_) => {}
        }
    }
    paths
}

fn steps_exprs<'a>(path: &'a [DataStep], exprs: &mut Vec<&'a StateExpr>) {
    for step in path {
        if let DataStep::Index(e) = step {
            exprs.push(e);
        }
    }
}

/// Adds every field `path` passes through to `out` (a field of a tree's enum: that field
/// of every variant having it).
fn mark(schema: &Schema, path: &[DataStep], out: &mut Vec<(Owner, usize)>) {
    let mut ty = DataTy::Record(schema.input);
    // The variant a `Variant` step chose for the field after it: that variant's field alone.
    let mut only: Option<u32> = None;
    for step in path {
        let arm = only.take();
        ty = match (step, &ty) {
            (DataStep::Variant(k), DataTy::Enum(_)) => {
                only = Some(*k);
                ty.clone()
            }
            (DataStep::Field(name), DataTy::Record(r)) => {
                let Some(record) = schema.records.get(*r as usize) else { return };
                let Some(i) = record.fields.iter().position(|f| f.name == *name) else { return };
                out.push((Owner::Record(*r), i));
                record.fields[i].ty.clone()
            }
            (DataStep::Field(name), DataTy::Enum(e)) => {
                let Some(enumeration) = schema.enums.get(*e as usize) else { return };
                let mut next = None;
                let chosen =
                    enumeration.variants.iter().enumerate().filter(|(v, _)| arm.is_none_or(|k| *v == k as usize));
                for (v, variant) in chosen {
                    if let Some(i) = variant.fields.iter().position(|f| f.name == *name) {
                        out.push((Owner::Variant(*e, v as u32), i));
                        next.get_or_insert_with(|| variant.fields[i].ty.clone());
                    }
                }
                match next {
                    Some(t) => t,
                    None => return,
                }
            }
            (DataStep::Index(_), DataTy::Seq(t)) => (**t).clone(),
            // A tree's nodes, flattened: still the enum.
            (DataStep::Index(_), DataTy::Enum(e)) => DataTy::Enum(*e),
            (DataStep::Index(index), DataTy::Tuple(ts)) => match index.as_ref() {
                StateExpr::Const(k) => match usize::try_from(*k).ok().and_then(|k| ts.get(k)) {
                    Some(t) => t.clone(),
                    None => return,
                },
                _ => return,
            },
            _ => return,
        };
    }
}

fn field_type(schema: &Schema, owner: Owner, i: usize) -> Option<&DataTy> {
    match owner {
        Owner::Record(r) => schema.records.get(r as usize)?.fields.get(i).map(|f| &f.ty),
        Owner::Variant(e, v) => schema.enums.get(e as usize)?.variants.get(v as usize)?.fields.get(i).map(|f| &f.ty),
    }
}

fn field_name(schema: &Schema, owner: Owner, i: usize) -> Option<&str> {
    match owner {
        Owner::Record(r) => schema.records.get(r as usize)?.fields.get(i).map(|f| f.name.as_str()),
        Owner::Variant(e, v) => {
            schema.enums.get(e as usize)?.variants.get(v as usize)?.fields.get(i).map(|f| f.name.as_str())
        }
    }
}

/// The zero of a type: what a missing label becomes. Enums have none; records nest at
/// most a few levels (the schema checker refuses recursive records).
fn zero(schema: &Schema, ty: &DataTy, depth: usize) -> Option<Value> {
    if depth > 64 {
        return None;
    }
    Some(match ty {
        DataTy::Int => Value::Int(0),
        DataTy::Bool => Value::Bool(false),
        DataTy::F32(dims) => {
            let shape: Vec<usize> = dims.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
            // Labels are small (a class, a regression target): refuse to build a huge zero.
            let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).filter(|&n| n <= 1 << 24)?;
            Tensor::new(shape, vec![0.0; count]).map(Value::Tensor)?
        }
        DataTy::Seq(_) => Value::Seq(Vec::new()),
        DataTy::Tuple(ts) => Value::Tuple(ts.iter().map(|t| zero(schema, t, depth + 1)).collect::<Option<_>>()?),
        DataTy::Record(r) => Value::Record(
            schema
                .records
                .get(*r as usize)?
                .fields
                .iter()
                .map(|f| zero(schema, &f.ty, depth + 1))
                .collect::<Option<_>>()?,
        ),
        DataTy::Enum(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use amp_ir::{EnumSchema, FieldSchema, RecordSchema, VariantSchema};

    fn field(name: &str, ty: DataTy) -> FieldSchema {
        FieldSchema { name: name.into(), ty }
    }

    /// SST's schema: a sentence's label and every tree node's label.
    fn sst() -> Unlabeled {
        let tree = DataTy::Enum(0);
        let schema = Schema {
            records: vec![RecordSchema {
                name: "Sentence".into(),
                fields: vec![field("tree", tree.clone()), field("label", DataTy::Int)],
            }],
            enums: vec![EnumSchema {
                name: "Tree".into(),
                variants: vec![
                    VariantSchema {
                        name: "Leaf".into(),
                        fields: vec![field("word", DataTy::Int), field("label", DataTy::Int)],
                    },
                    VariantSchema {
                        name: "Node".into(),
                        fields: vec![field("left", tree.clone()), field("right", tree), field("label", DataTy::Int)],
                    },
                ],
            }],
            input: 0,
        };
        let labels = vec![(Owner::Record(0), 1), (Owner::Variant(0, 0), 1), (Owner::Variant(0, 1), 2)];
        Unlabeled::new(schema, labels)
    }

    fn leaf(word: i64, label: Option<i64>) -> Value {
        let mut fields = vec![Value::Int(word)];
        fields.extend(label.map(Value::Int));
        Value::Variant { tag: 0, fields }
    }

    #[test]
    fn labels_are_left_out_and_put_back_as_zeros() {
        let u = sst();
        assert_eq!(u.label_names(), vec!["Sentence.label", "Tree::Leaf.label", "Tree::Node.label"]);
        assert_eq!(u.field_names(), vec!["label"]);
        assert_eq!(u.reduced().records[0].fields.len(), 1);
        assert_eq!(u.reduced().enums[0].variants[1].fields.len(), 2);
        let node = |l, r, label: Option<i64>| {
            let mut fields = vec![l, r];
            fields.extend(label.map(Value::Int));
            Value::Variant { tag: 1, fields }
        };
        let reduced = Value::Record(vec![node(leaf(4, None), leaf(7, None), None)]);
        let zeros = Value::Record(vec![node(leaf(4, Some(0)), leaf(7, Some(0)), Some(0)), Value::Int(0)]);
        assert_eq!(u.fill(reduced).unwrap(), zeros);
        let labeled = Value::Record(vec![node(leaf(4, Some(3)), leaf(7, Some(1)), Some(2)), Value::Int(2)]);
        assert_eq!(u.clear(labeled).unwrap(), zeros);
        // A value that lacks a forward field is an error, not a panic.
        assert!(u.fill(Value::Record(Vec::new())).is_err());
    }
}
