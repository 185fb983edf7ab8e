//! Moving a value into an instance's form: checked against the schema as it goes, every
//! tree flattened (see the parent module), and the helpers that name a value, a type and a
//! field in the loaders' errors.

use super::{is_collection_of, FlatNode, FlatTree, PreparedSchema, MAX_NESTING};
use crate::{DataError, DataErrorKind, Value};
use amp_ir::{DataTy, Schema};

/// Checks a value against the schema while moving it into the instance's form.
pub(super) struct Builder<'s> {
    pub schema: &'s PreparedSchema,
    pub trees: Vec<FlatTree>,
}

/// Appends `.name` (or `name` at the start) to a field path.
pub(crate) fn push_field(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

/// Describes a value's kind for `found ...` in an error.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Int(i) => format!("the int {i}"),
        Value::Bool(b) => format!("the bool {b}"),
        Value::Tensor(t) => format!("a tensor of shape {:?}", t.shape),
        Value::Seq(items) => format!("a sequence of {}", items.len()),
        Value::Tuple(items) => format!("a tuple of {}", items.len()),
        Value::Record(fields) => format!("a record of {} fields", fields.len()),
        Value::Variant { tag, fields } => format!("variant #{tag} with {} fields", fields.len()),
    }
}

/// `expected ...` for a type: `an int`, `a value of type [int]`.
pub(crate) fn expected(schema: &Schema, ty: &DataTy) -> String {
    match ty {
        DataTy::Int => "an int".into(),
        DataTy::Bool => "a bool".into(),
        _ => format!("a value of type {}", schema.ty_name(ty)),
    }
}

impl Builder<'_> {
    pub fn value(&mut self, value: Value, ty: &DataTy, path: &mut String, depth: usize) -> Result<Value, DataError> {
        if depth > MAX_NESTING {
            return Err(DataError::new(DataErrorKind::TooDeep { limit: MAX_NESTING }).in_field(path.clone()));
        }
        let prepared = self.schema;
        let schema = &prepared.schema;
        let mismatch = |value: &Value, path: &String| {
            Err(DataError::mismatch(expected(schema, ty), describe(value)).in_field(path.clone()))
        };
        let mark = path.len();
        match (ty, value) {
            (DataTy::Int, v @ Value::Int(_)) | (DataTy::Bool, v @ Value::Bool(_)) => Ok(v),
            (DataTy::F32(dims), Value::Tensor(t)) => {
                let fits = dims.len() == t.shape.len()
                    && dims.iter().zip(&t.shape).all(|(&d, &s)| u64::try_from(s).is_ok_and(|s| s == d))
                    && t.elements() == Some(t.data.len());
                if fits {
                    Ok(Value::Tensor(t))
                } else {
                    mismatch(&Value::Tensor(t), path)
                }
            }
            (DataTy::Seq(item), Value::Seq(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, v) in items.into_iter().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    out.push(self.value(v, item, path, depth + 1)?);
                    path.truncate(mark);
                }
                Ok(Value::Seq(out))
            }
            (DataTy::Tuple(tys), Value::Tuple(items)) if tys.len() == items.len() => {
                let mut out = Vec::with_capacity(items.len());
                for (i, (v, t)) in items.into_iter().zip(tys).enumerate() {
                    path.push_str(&format!("[{i}]"));
                    out.push(self.value(v, t, path, depth + 1)?);
                    path.truncate(mark);
                }
                Ok(Value::Tuple(out))
            }
            (DataTy::Record(r), Value::Record(items)) => {
                let Some(record) = schema.records.get(*r as usize) else {
                    return mismatch(&Value::Record(items), path);
                };
                if record.fields.len() != items.len() {
                    return mismatch(&Value::Record(items), path);
                }
                let mut out = Vec::with_capacity(items.len());
                for (v, f) in items.into_iter().zip(&record.fields) {
                    push_field(path, &f.name);
                    out.push(self.value(v, &f.ty, path, depth + 1)?);
                    path.truncate(mark);
                }
                Ok(Value::Record(out))
            }
            (DataTy::Enum(e), v @ Value::Variant { .. }) if prepared.is_tree(*e) => self.tree(v, *e, path, depth),
            (DataTy::Enum(e), Value::Variant { tag, fields }) => {
                let variant = schema.enums.get(*e as usize).and_then(|en| en.variants.get(tag as usize));
                let Some(variant) = variant.filter(|v| v.fields.len() == fields.len()) else {
                    return mismatch(&Value::Variant { tag, fields }, path);
                };
                let mut out = Vec::with_capacity(fields.len());
                for (v, f) in fields.into_iter().zip(&variant.fields) {
                    push_field(path, &f.name);
                    out.push(self.value(v, &f.ty, path, depth + 1)?);
                    path.truncate(mark);
                }
                Ok(Value::Variant { tag, fields: out })
            }
            (_, v) => mismatch(&v, path),
        }
    }

    /// Flattens a tree in pre-order with an explicit stack; returns the marker that stands
    /// for it in its parent value (the tree's index).
    fn tree(&mut self, root: Value, id: u32, path: &str, depth: usize) -> Result<Value, DataError> {
        let prepared = self.schema;
        let schema = &prepared.schema;
        let Some(enumeration) = schema.enums.get(id as usize) else {
            return Err(DataError::mismatch(expected(schema, &DataTy::Enum(id)), describe(&root)).in_field(path));
        };
        let sites = prepared.sites.get(id as usize).copied().unwrap_or(0);
        let index = self.trees.len();
        // Reserve the slot first: trees nested in this one's fields take the next indices.
        self.trees.push(FlatTree { enumeration: id, sites, nodes: Vec::new(), children: Vec::new() });
        let mut nodes: Vec<FlatNode> = Vec::new();
        let mut children: Vec<i64> = Vec::new();
        // For error paths: each node's parent, the field index it hangs from, and its
        // position there when that is a collection.
        let mut links: Vec<(i64, usize, Option<usize>)> = Vec::new();
        let mut stack = vec![(root, -1i64, 0usize, -1i64, None::<usize>)];
        while let Some((value, parent, field_in_parent, site, position)) = stack.pop() {
            let number = nodes.len() as i64;
            let node_path = |extra: Option<&str>| {
                let mut names = Vec::new();
                let (mut p, mut f, mut at) = (parent, field_in_parent, position);
                while let Some(node) = usize::try_from(p).ok().and_then(|p| nodes.get(p)) {
                    let name = enumeration.variants.get(node.tag as usize).and_then(|v| v.fields.get(f));
                    let name = name.map_or("?", |f| f.name.as_str());
                    names.push(at.map_or_else(|| name.to_string(), |i| format!("{name}[{i}]")));
                    (p, f, at) = links.get(p as usize).copied().unwrap_or((-1, 0, None));
                }
                let mut out = path.to_string();
                for name in names.iter().rev().map(String::as_str).chain(extra) {
                    push_field(&mut out, name);
                }
                out
            };
            let found = match value {
                Value::Variant { tag, fields } => {
                    match enumeration.variants.get(tag as usize).filter(|v| v.fields.len() == fields.len()) {
                        Some(variant) => Ok((tag, fields, variant)),
                        None => Err(describe(&Value::Variant { tag, fields })),
                    }
                }
                other => Err(describe(&other)),
            };
            let (tag, fields, variant) = match found {
                Ok(found) => found,
                Err(found) => {
                    return Err(DataError::mismatch(format!("a value of type {}", enumeration.name), found)
                        .in_field(node_path(None)))
                }
            };
            let mut kept = Vec::with_capacity(fields.len());
            let mut recursive = Vec::new();
            for (i, (field_value, field)) in fields.into_iter().zip(&variant.fields).enumerate() {
                let child_site = || schema.site(id, tag, i as u32).map_or(-1, i64::from);
                if field.ty == DataTy::Enum(id) {
                    kept.push(Value::Int(-1)); // set when the child gets its number
                    recursive.push((field_value, number, i, child_site(), None));
                } else if is_collection_of(&field.ty, id) {
                    let Value::Seq(items) = field_value else {
                        let found = describe(&field_value);
                        return Err(DataError::mismatch(expected(schema, &field.ty), found)
                            .in_field(node_path(Some(&field.name))));
                    };
                    kept.push(Value::Seq(vec![Value::Int(-1); items.len()]));
                    for (e, item) in items.into_iter().enumerate() {
                        recursive.push((item, number, i, child_site(), Some(e)));
                    }
                } else {
                    // The path from the tree's root is built only for an error: building it
                    // for every node would cost the tree's depth each time.
                    let mut field_path = field.name.clone();
                    match self.value(field_value, &field.ty, &mut field_path, depth + 1) {
                        Ok(value) => kept.push(value),
                        Err(error) => return Err(error.map_field(|inner| node_path(Some(inner)))),
                    }
                }
            }
            if let Ok(parent) = usize::try_from(parent) {
                match nodes.get_mut(parent).and_then(|p| p.fields.get_mut(field_in_parent)) {
                    Some(Value::Seq(items)) => {
                        if let Some(slot) = position.and_then(|e| items.get_mut(e)) {
                            *slot = Value::Int(number);
                        }
                    }
                    Some(slot) => *slot = Value::Int(number),
                    None => {}
                }
                // `$child[s]` is the first child of a collection.
                if position.unwrap_or(0) == 0 {
                    if let Some(slot) = usize::try_from(site).ok().and_then(|s| children.get_mut(parent * sites + s)) {
                        *slot = number;
                    }
                }
            }
            let index = if parent < 0 { -1 } else { position.unwrap_or(0) as i64 };
            nodes.push(FlatNode { tag, parent, site, index, fields: kept });
            links.push((parent, field_in_parent, position));
            children.extend(std::iter::repeat_n(-1, sites));
            stack.extend(recursive.into_iter().rev());
        }
        if let Some(slot) = self.trees.get_mut(index) {
            slot.nodes = nodes;
            slot.children = children;
        }
        Ok(Value::Int(index as i64))
    }
}
