//! One instance as the runtime sees it: a checked [`Value`] of the input record, with every
//! tree flattened once so that the data paths of `amp_ir::StateExpr` evaluate in constant
//! time per step, without allocating.
//!
//! Paths start at the instance record. `Field(name)` selects a record field (by the
//! schema's name) or a field of an enum value's variant (`$tag` gives the variant index);
//! `Index(i)` selects a sequence or tuple element; `Variant(k)` stays on an enum value (or
//! tree node) of variant `k` and leads nowhere on another. Ints are `Int`s and `Bool`s (0/1).
//!
//! **Trees.** A value of a recursive enum ([`Schema::is_recursive`]) is viewed flattened:
//! its nodes are numbered in pre-order (the value itself is node 0, then the subtrees of
//! its *recursive fields* — fields whose type is the enum itself — in field order, depth
//! first). A *collection* field, of type `[T]` with `T` the enum itself, holds children too:
//! its elements are subtrees of the node, numbered in order, after the subtrees of the
//! fields before it. On the tree value, `Index(n)` selects node `n` and `len` is the node
//! count; `Field` steps act on node 0. On a node:
//!
//! | step | gives |
//! |---|---|
//! | `$tag` | the variant index |
//! | `$parent` | the parent's node number, `-1` at the root |
//! | `$site` | `Schema::site(enum, parent variant, field)` of the field the node hangs from, `-1` at the root |
//! | `$index` | the node's position in its parent's collection field, `0` under a plain recursive field, `-1` at the root |
//! | `$child` then `Index(s)` | the (first) node hanging from global site `s`, `-1` if there is none |
//! | `$child` then `Index(s)`, `Index(e)` | the node at position `e` of site `s` (`0` for a plain recursive field), `-1` if there is none |
//! | a recursive field | the child's node number (further `Field` steps act on the child) |
//! | a collection field | its children: `len` counts them, `Index(e)` is child `e` |
//! | another field of the node's variant | that field's value, as usual (`$.tree[%n].word`) |
//!
//! A tree reached through anything else (a record field of a node holding a `Tree`, a
//! `[(Tree, int)]`) is a tree of its own with its own numbering. Evaluation never panics: a path
//! that does not fit the value gives `None`.

mod build;

pub(crate) use build::{describe, expected, push_field};

use crate::ranges::RangeStep;
use crate::{DataError, Tensor, Value};
use amp_ir::{DataTy, InstanceData, ResolvedStep, Schema};
use build::Builder;
use std::sync::Arc;

/// How deeply values may nest outside trees (records in sequences in variants...); trees
/// themselves are walked without recursion and may be as deep as the loaders allow.
pub const MAX_NESTING: usize = 256;

/// A schema checked once and annotated for evaluation (which enums are trees, how many
/// sites each has), shared by all instances of a data set.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedSchema {
    schema: Schema,
    recursive: Vec<bool>,
    sites: Vec<usize>,
}

impl PreparedSchema {
    /// Checks the schema (every type reference in range) and annotates it.
    pub fn new(schema: Schema) -> Result<PreparedSchema, DataError> {
        schema.check().map_err(DataError::schema)?;
        let enums = 0..schema.enums.len() as u32;
        let recursive = enums.clone().map(|e| schema.is_recursive(e)).collect();
        let sites = enums.map(|e| schema.site_count(e) as usize).collect();
        Ok(PreparedSchema { schema, recursive, sites })
    }

    /// The schema as given.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Whether values of enum `id` are trees (viewed flattened).
    pub fn is_tree(&self, id: u32) -> bool {
        self.recursive.get(id as usize).copied().unwrap_or(false)
    }
}

/// One instance: its record (with each tree replaced by the index of its flattened form)
/// and the flattened trees.
#[derive(Clone, Debug)]
pub struct Instance {
    schema: Arc<PreparedSchema>,
    root_ty: DataTy,
    record: Value,
    trees: Vec<FlatTree>,
    columns: Vec<Column>,
    /// Elements of its sequences and nodes of its trees: see [`Instance::size`].
    size: usize,
}

/// The ints of one field of every record of a `[R]` field of the instance's record, in
/// a row. A batched map's row ops read a field of every element (each edge's source,
/// kind, destination: [`Instance::ints_along`]); read through each element's record,
/// that was a cache miss or two per row, a few percent of GGSNN's training time.
#[derive(Clone, Debug)]
struct Column {
    /// The position of the sequence among the instance record's fields, and of the int
    /// among its elements'.
    seq: usize,
    field: usize,
    ints: Box<[i64]>,
}

/// A tree's nodes in pre-order.
#[derive(Clone, Debug)]
struct FlatTree {
    enumeration: u32,
    /// Sites of the enum: the row length of `children`.
    sites: usize,
    nodes: Vec<FlatNode>,
    /// `children[node * sites + site]`: the child hanging from `site`, or -1.
    children: Vec<i64>,
}

#[derive(Clone, Debug)]
struct FlatNode {
    tag: u32,
    parent: i64,
    site: i64,
    /// Position in the parent's collection field (0 under a plain recursive field).
    index: i64,
    /// The variant's fields; a recursive field holds the child's node number as an `Int`,
    /// a collection field a `Seq` of them.
    fields: Vec<Value>,
}

/// Where a path has got to.
#[derive(Clone, Copy)]
enum Cursor<'a> {
    Data(&'a Value, &'a DataTy),
    Node {
        tree: &'a FlatTree,
        node: usize,
        whole: bool,
    },
    Children {
        tree: &'a FlatTree,
        node: usize,
    },
    /// `$child[s]`: the children of `node` at site `site`; as a value, the first of them.
    Site {
        tree: &'a FlatTree,
        node: usize,
        site: usize,
    },
    /// A collection field of a node: the children's node numbers.
    Kids {
        tree: &'a FlatTree,
        items: &'a [Value],
    },
    Int(i64),
}

impl Instance {
    /// Checks `value` against `schema` (an instance of its input record) and flattens its
    /// trees. For many instances, prepare the schema once and use [`Instance::with_prepared`].
    pub fn new(schema: &Schema, value: Value) -> Result<Instance, DataError> {
        Instance::with_prepared(&Arc::new(PreparedSchema::new(schema.clone())?), value)
    }

    /// As [`Instance::new`], sharing a prepared schema.
    pub fn with_prepared(schema: &Arc<PreparedSchema>, value: Value) -> Result<Instance, DataError> {
        let root_ty = DataTy::Record(schema.schema.input);
        let mut builder = Builder { schema, trees: Vec::new() };
        let record = builder.value(value, &root_ty, &mut String::new(), 0)?;
        let columns = columns(&schema.schema, &root_ty, &record);
        let size = builder.trees.iter().map(|t| t.nodes.len()).sum::<usize>() + elements(&record);
        Ok(Instance { schema: Arc::clone(schema), root_ty, record, trees: builder.trees, columns, size })
    }

    /// How much there is of the instance, at least 1: the elements of its sequences and
    /// the nodes of its trees, nested ones included. A model's work on an instance grows
    /// with these (a list's steps, a tree's cells, a graph's messages), so the executor
    /// balances copies of the graph by it.
    pub fn size(&self) -> usize {
        self.size.max(1)
    }

    /// The schema the instance was checked against.
    pub fn schema(&self) -> &Schema {
        &self.schema.schema
    }

    /// The instance as a plain value again (trees rebuilt from their flattened form).
    pub fn to_value(&self) -> Value {
        self.restore(&self.record, &self.root_ty, 0)
    }

    /// The f32 leaf at `path` (what a `read` node loads into its payload).
    pub fn tensor_at(&self, path: &[ResolvedStep]) -> Option<&Tensor> {
        match self.walk(path)? {
            Cursor::Data(Value::Tensor(t), _) => Some(t),
            _ => None,
        }
    }

    /// Calls `f(field, value)` with every int at `path`, where [`RangeStep::Each`] visits
    /// every element of a sequence or node of a tree; a field a variant lacks is passed
    /// over. Stops when `f` returns false. `field` spells the path with its indices.
    pub fn each_int(&self, path: &[RangeStep], f: &mut dyn FnMut(&str, i64) -> bool) {
        let mut stack = vec![(Cursor::Data(&self.record, &self.root_ty), 0usize, String::new())];
        while let Some((cursor, at, spelled)) = stack.pop() {
            let Some(step) = path.get(at) else {
                let value = match cursor {
                    Cursor::Data(Value::Int(i), _) => Some(*i),
                    Cursor::Int(i) => Some(i),
                    Cursor::Data(Value::Bool(b), _) => Some(i64::from(*b)),
                    _ => None,
                };
                if value.is_some_and(|v| !f(&spelled, v)) {
                    return;
                }
                continue;
            };
            let mut successors: Vec<(Option<Cursor<'_>>, String)> = Vec::new();
            match step {
                RangeStep::Field(name) => {
                    let spelled = if spelled.is_empty() { name.clone() } else { format!("{spelled}.{name}") };
                    successors.push((self.step(cursor, &ResolvedStep::Field(name)), spelled));
                }
                RangeStep::At(k) => {
                    successors.push((self.step(cursor, &ResolvedStep::Index(*k)), format!("{spelled}[{k}]")));
                }
                // A value of another variant has no such field: passed over, as a field
                // the variant lacks is.
                RangeStep::Variant(k) => successors.push((self.step(cursor, &ResolvedStep::Variant(*k)), spelled)),
                RangeStep::Each => {
                    let count = match &cursor {
                        Cursor::Data(Value::Seq(items), _) => items.len(),
                        Cursor::Kids { items, .. } => items.len(),
                        Cursor::Node { tree, whole: true, .. } => tree.nodes.len(),
                        _ => 0,
                    };
                    // Reversed, so that the stack visits the elements in order.
                    for i in (0..count).rev() {
                        let Ok(k) = i64::try_from(i) else { continue };
                        let c = match &cursor {
                            Cursor::Data(v, t) => self.step(Cursor::Data(v, t), &ResolvedStep::Index(k)),
                            Cursor::Node { tree, node, whole } => {
                                self.step(Cursor::Node { tree, node: *node, whole: *whole }, &ResolvedStep::Index(k))
                            }
                            Cursor::Kids { tree, items } => {
                                self.step(Cursor::Kids { tree, items }, &ResolvedStep::Index(k))
                            }
                            _ => None,
                        };
                        successors.push((c, format!("{spelled}[{i}]")));
                    }
                }
            }
            for (c, spelled) in successors {
                if let Some(c) = c {
                    stack.push((c, at + 1, spelled));
                }
            }
        }
    }

    /// The ints at `prefix`, `Index(r)`, `suffix` for each row `r` in `0..rows`, as
    /// [`InstanceData::int_at`] gives them one by one; `None` if any row's path does not
    /// lead to an int. A batched map's row ops read a field of every element of a
    /// sequence (each edge's source, kind, destination): the prefix is walked once and a
    /// record field's position found once, not per row by its name.
    pub fn ints_along(&self, prefix: &[ResolvedStep], rows: usize, suffix: &[ResolvedStep]) -> Option<Vec<i64>> {
        if let ([ResolvedStep::Field(seq)], [ResolvedStep::Field(field)]) = (prefix, suffix) {
            if let Some(column) = self.column(seq, field) {
                return column.get(..rows).map(<[i64]>::to_vec);
            }
        }
        let base = self.walk(prefix)?;
        let mut out = Vec::with_capacity(rows);
        if let (Cursor::Data(Value::Seq(items), DataTy::Seq(item)), Some((ResolvedStep::Field(name), rest))) =
            (base, suffix.split_first())
        {
            if let DataTy::Record(r) = &**item {
                let fields = &self.schema.schema.records.get(*r as usize)?.fields;
                let i = fields.iter().position(|f| f.name == *name)?;
                for value in items.get(..rows)? {
                    let Value::Record(values) = value else { return None };
                    let mut cursor = self.enter(values.get(i)?, &fields[i].ty)?;
                    for step in rest {
                        cursor = self.step(cursor, step)?;
                    }
                    out.push(cursor_int(cursor)?);
                }
                return Some(out);
            }
        }
        for r in 0..rows {
            let mut cursor = self.step(base, &ResolvedStep::Index(i64::try_from(r).ok()?))?;
            for step in suffix {
                cursor = self.step(cursor, step)?;
            }
            out.push(cursor_int(cursor)?);
        }
        Some(out)
    }

    /// The column of int field `field` of the records in sequence field `seq`, if kept.
    fn column(&self, seq: &str, field: &str) -> Option<&[i64]> {
        let records = &self.schema.schema.records;
        let DataTy::Record(root) = self.root_ty else { return None };
        let fields = &records.get(root as usize)?.fields;
        let at = fields.iter().position(|f| f.name == seq)?;
        let DataTy::Seq(item) = &fields[at].ty else { return None };
        let DataTy::Record(element) = **item else { return None };
        let inner = records.get(element as usize)?.fields.iter().position(|f| f.name == field)?;
        self.columns.iter().find(|c| c.seq == at && c.field == inner).map(|c| &*c.ints)
    }

    fn walk(&self, path: &[ResolvedStep]) -> Option<Cursor<'_>> {
        let mut cursor = Cursor::Data(&self.record, &self.root_ty);
        for step in path {
            cursor = self.step(cursor, step)?;
        }
        Some(cursor)
    }

    /// Enters a value of type `ty`: a tree becomes its node 0, seen as the whole tree.
    fn enter<'a>(&'a self, value: &'a Value, ty: &'a DataTy) -> Option<Cursor<'a>> {
        match (ty, value) {
            (DataTy::Enum(e), Value::Int(index)) if self.schema.is_tree(*e) => {
                let tree = self.trees.get(usize::try_from(*index).ok()?)?;
                Some(Cursor::Node { tree, node: 0, whole: true })
            }
            _ => Some(Cursor::Data(value, ty)),
        }
    }

    fn step<'a>(&'a self, cursor: Cursor<'a>, step: &ResolvedStep) -> Option<Cursor<'a>> {
        let schema = &self.schema.schema;
        match (cursor, step) {
            (Cursor::Data(Value::Record(values), DataTy::Record(r)), ResolvedStep::Field(name)) => {
                let fields = &schema.records.get(*r as usize)?.fields;
                let i = fields.iter().position(|f| f.name == *name)?;
                self.enter(values.get(i)?, &fields[i].ty)
            }
            (Cursor::Data(Value::Variant { tag, .. }, DataTy::Enum(_)), ResolvedStep::Field("$tag")) => {
                Some(Cursor::Int(i64::from(*tag)))
            }
            (Cursor::Data(Value::Variant { tag, .. }, DataTy::Enum(_)), ResolvedStep::Variant(k)) => {
                (tag == k).then_some(cursor)
            }
            (Cursor::Node { tree, node, .. }, ResolvedStep::Variant(k)) => {
                (tree.nodes.get(node)?.tag == *k).then_some(cursor)
            }
            (Cursor::Data(Value::Variant { tag, fields: values }, DataTy::Enum(e)), ResolvedStep::Field(name)) => {
                let fields = &schema.enums.get(*e as usize)?.variants.get(*tag as usize)?.fields;
                let i = fields.iter().position(|f| f.name == *name)?;
                self.enter(values.get(i)?, &fields[i].ty)
            }
            (Cursor::Data(Value::Seq(items), DataTy::Seq(ty)), ResolvedStep::Index(i)) => {
                self.enter(items.get(usize::try_from(*i).ok()?)?, ty)
            }
            (Cursor::Data(Value::Tuple(items), DataTy::Tuple(tys)), ResolvedStep::Index(i)) => {
                let i = usize::try_from(*i).ok()?;
                self.enter(items.get(i)?, tys.get(i)?)
            }
            (Cursor::Node { tree, whole: true, .. }, ResolvedStep::Index(n)) => {
                let node = usize::try_from(*n).ok().filter(|&n| n < tree.nodes.len())?;
                Some(Cursor::Node { tree, node, whole: false })
            }
            (Cursor::Node { tree, node, .. }, ResolvedStep::Field(name)) => self.node_field(tree, node, name),
            (Cursor::Children { tree, node }, ResolvedStep::Index(s)) => {
                let site = usize::try_from(*s).ok().filter(|&s| s < tree.sites)?;
                Some(Cursor::Site { tree, node, site })
            }
            (Cursor::Site { tree, node, site }, ResolvedStep::Index(e)) => {
                let child = self.child_at(tree, node, site, *e).unwrap_or(-1);
                Some(node_or_none(tree, child))
            }
            // Any other step on `$child[s]` acts on its first child.
            (Cursor::Site { tree, node, site }, step) => {
                self.step(node_or_none(tree, tree.first_child(node, site)?), step)
            }
            (Cursor::Kids { tree, items }, ResolvedStep::Index(e)) => {
                let Value::Int(child) = items.get(usize::try_from(*e).ok()?)? else { return None };
                let node = usize::try_from(*child).ok().filter(|&c| c < tree.nodes.len())?;
                Some(Cursor::Node { tree, node, whole: false })
            }
            _ => None,
        }
    }

    /// The child at position `e` of site `site` of `node`: of the collection field at
    /// that site, or (for `e` = 0) of the plain recursive field.
    fn child_at(&self, tree: &FlatTree, node: usize, site: usize, e: i64) -> Option<i64> {
        let flat = tree.nodes.get(node)?;
        let variants = &self.schema.schema.enums.get(tree.enumeration as usize)?.variants;
        let before: usize = variants.get(..flat.tag as usize)?.iter().map(|v| v.fields.len()).sum();
        let field = site.checked_sub(before)?;
        let ty = &variants.get(flat.tag as usize)?.fields.get(field)?.ty;
        match flat.fields.get(field)? {
            Value::Int(child) if e == 0 && *ty == DataTy::Enum(tree.enumeration) => Some(*child),
            Value::Seq(items) if is_collection_of(ty, tree.enumeration) => match items.get(usize::try_from(e).ok()?)? {
                Value::Int(child) => Some(*child),
                _ => None,
            },
            _ => None,
        }
    }

    fn node_field<'a>(&'a self, tree: &'a FlatTree, node: usize, name: &str) -> Option<Cursor<'a>> {
        let flat = tree.nodes.get(node)?;
        match name {
            "$tag" => return Some(Cursor::Int(i64::from(flat.tag))),
            "$parent" => return Some(Cursor::Int(flat.parent)),
            "$site" => return Some(Cursor::Int(flat.site)),
            "$index" => return Some(Cursor::Int(flat.index)),
            "$child" => return Some(Cursor::Children { tree, node }),
            _ => {}
        }
        let variant = self.schema.schema.enums.get(tree.enumeration as usize)?.variants.get(flat.tag as usize)?;
        let i = variant.fields.iter().position(|f| f.name == name)?;
        let (value, ty) = (flat.fields.get(i)?, &variant.fields[i].ty);
        if *ty == DataTy::Enum(tree.enumeration) {
            let Value::Int(child) = value else { return None };
            let node = usize::try_from(*child).ok().filter(|&c| c < tree.nodes.len())?;
            return Some(Cursor::Node { tree, node, whole: false });
        }
        if is_collection_of(ty, tree.enumeration) {
            let Value::Seq(items) = value else { return None };
            return Some(Cursor::Kids { tree, items });
        }
        self.enter(value, ty)
    }

    fn restore(&self, value: &Value, ty: &DataTy, depth: usize) -> Value {
        let schema = &self.schema.schema;
        if depth > MAX_NESTING {
            return value.clone(); // not reached: construction bounded the nesting
        }
        match (ty, value) {
            (DataTy::Enum(e), Value::Int(index)) if self.schema.is_tree(*e) => {
                match usize::try_from(*index).ok().and_then(|i| self.trees.get(i)) {
                    Some(tree) => self.restore_tree(tree, depth),
                    None => value.clone(),
                }
            }
            (DataTy::Seq(ty), Value::Seq(items)) => {
                Value::Seq(items.iter().map(|v| self.restore(v, ty, depth + 1)).collect())
            }
            (DataTy::Tuple(tys), Value::Tuple(items)) => {
                Value::Tuple(items.iter().zip(tys).map(|(v, t)| self.restore(v, t, depth + 1)).collect())
            }
            (DataTy::Record(r), Value::Record(items)) => match schema.records.get(*r as usize) {
                Some(record) => Value::Record(
                    items.iter().zip(&record.fields).map(|(v, f)| self.restore(v, &f.ty, depth + 1)).collect(),
                ),
                None => value.clone(),
            },
            (DataTy::Enum(e), Value::Variant { tag, fields }) => {
                match schema.enums.get(*e as usize).and_then(|e| e.variants.get(*tag as usize)) {
                    Some(variant) => Value::Variant {
                        tag: *tag,
                        fields: fields
                            .iter()
                            .zip(&variant.fields)
                            .map(|(v, f)| self.restore(v, &f.ty, depth + 1))
                            .collect(),
                    },
                    None => value.clone(),
                }
            }
            _ => value.clone(),
        }
    }

    /// Rebuilds a tree bottom-up (children have larger numbers than their parents), so
    /// deep trees need no recursion.
    fn restore_tree(&self, tree: &FlatTree, depth: usize) -> Value {
        let variants = self.schema.schema.enums.get(tree.enumeration as usize).map_or(&[][..], |e| &e.variants);
        let mut built: Vec<Option<Value>> = vec![None; tree.nodes.len()];
        for (n, node) in tree.nodes.iter().enumerate().rev() {
            let types = variants.get(node.tag as usize).map_or(&[][..], |v| &v.fields);
            let fields = node
                .fields
                .iter()
                .zip(types)
                .map(|(value, field)| {
                    let mut take = |child: i64| {
                        usize::try_from(child)
                            .ok()
                            .and_then(|c| built.get_mut(c))
                            .and_then(Option::take)
                            .unwrap_or(Value::Int(child))
                    };
                    match value {
                        Value::Int(child) if field.ty == DataTy::Enum(tree.enumeration) => take(*child),
                        Value::Seq(items) if is_collection_of(&field.ty, tree.enumeration) => Value::Seq(
                            items.iter().map(|v| if let Value::Int(c) = v { take(*c) } else { v.clone() }).collect(),
                        ),
                        _ => self.restore(value, &field.ty, depth + 1),
                    }
                })
                .collect();
            if let Some(slot) = built.get_mut(n) {
                *slot = Some(Value::Variant { tag: node.tag, fields });
            }
        }
        built.first_mut().and_then(Option::take).unwrap_or(Value::Seq(Vec::new()))
    }
}

impl InstanceData for Instance {
    fn int_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        cursor_int(self.walk(path)?)
    }

    fn len_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        match self.walk(path)? {
            Cursor::Data(Value::Seq(items), _) => i64::try_from(items.len()).ok(),
            Cursor::Kids { items, .. } => i64::try_from(items.len()).ok(),
            Cursor::Node { tree, whole: true, .. } => i64::try_from(tree.nodes.len()).ok(),
            _ => None,
        }
    }
}

/// Every [`Column`] of a checked instance record: the `int` fields of its `[R]` fields.
fn columns(schema: &Schema, root: &DataTy, record: &Value) -> Vec<Column> {
    let (DataTy::Record(r), Value::Record(values)) = (root, record) else { return Vec::new() };
    let Some(fields) = schema.records.get(*r as usize).map(|r| &r.fields) else { return Vec::new() };
    let mut out = Vec::new();
    for (seq, (f, value)) in fields.iter().zip(values).enumerate() {
        let (DataTy::Seq(item), Value::Seq(items)) = (&f.ty, value) else { continue };
        let DataTy::Record(e) = **item else { continue };
        let Some(element) = schema.records.get(e as usize) else { continue };
        for (field, _) in element.fields.iter().enumerate().filter(|(_, g)| g.ty == DataTy::Int) {
            let ints = items
                .iter()
                .map(|v| match v {
                    Value::Record(values) => match values.get(field) {
                        Some(Value::Int(i)) => Some(*i),
                        _ => None,
                    },
                    _ => None,
                })
                .collect::<Option<Box<[i64]>>>();
            out.extend(ints.map(|ints| Column { seq, field, ints }));
        }
    }
    out
}

/// The int a path ends at: an int or bool leaf, a tree node's number, or a computed int.
fn cursor_int(cursor: Cursor<'_>) -> Option<i64> {
    match cursor {
        Cursor::Data(Value::Int(i), _) => Some(*i),
        Cursor::Data(Value::Bool(b), _) => Some(i64::from(*b)),
        Cursor::Node { node, .. } => i64::try_from(node).ok(),
        Cursor::Int(i) => Some(i),
        Cursor::Site { tree, node, site } => tree.first_child(node, site),
        _ => None,
    }
}

impl FlatTree {
    /// The (first) node hanging from `site` of `node` (`$child[site]`), -1 if none.
    fn first_child(&self, node: usize, site: usize) -> Option<i64> {
        self.children.get(node.checked_mul(self.sites)?.checked_add(site)?).copied()
    }
}

/// The elements of the sequences in `value`, nested ones included (a tree is counted
/// by its nodes, not here: its place in the record holds its number).
fn elements(value: &Value) -> usize {
    match value {
        Value::Seq(items) => items.len() + items.iter().map(elements).sum::<usize>(),
        Value::Tuple(items) | Value::Record(items) | Value::Variant { fields: items, .. } => {
            items.iter().map(elements).sum()
        }
        Value::Int(_) | Value::Bool(_) | Value::Tensor(_) => 0,
    }
}

/// A node number as a cursor: the node, or the number itself when it is none (-1).
fn node_or_none(tree: &FlatTree, child: i64) -> Cursor<'_> {
    match usize::try_from(child).ok().filter(|&c| c < tree.nodes.len()) {
        Some(node) => Cursor::Node { tree, node, whole: false },
        None => Cursor::Int(child),
    }
}

/// Whether `ty` is `[E]` for enum `e`: a collection field of `e`'s trees.
fn is_collection_of(ty: &DataTy, e: u32) -> bool {
    matches!(ty, DataTy::Seq(item) if **item == DataTy::Enum(e))
}
