//! The data schema of a graph's input: the record type each instance is, with the
//! records and enums it uses. The runtime loads data against it (JSON Lines, trees,
//! CSV) and evaluates the data paths of [`crate::StateExpr`] on values of it.
//!
//! Text form (inside the graph, before the parameters):
//! ```text
//!   record Example { tokens: [int], label: int }
//!   enum Tree { Leaf { word: int }, Node { left: Tree, right: Tree } }
//!   input Example
//! ```

use crate::text::field_name;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;

/// The type of one piece of instance data.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataTy {
    Int,
    Bool,
    /// An f32 tensor with concrete dimensions; `[]` is a scalar.
    F32(Vec<u64>),
    Seq(Box<DataTy>),
    Tuple(Vec<DataTy>),
    /// Index into [`Schema::records`].
    Record(u32),
    /// Index into [`Schema::enums`].
    Enum(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSchema {
    pub name: String,
    pub ty: DataTy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSchema {
    pub name: String,
    pub fields: Vec<FieldSchema>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantSchema {
    pub name: String,
    pub fields: Vec<FieldSchema>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnumSchema {
    pub name: String,
    pub variants: Vec<VariantSchema>,
}

/// Every record and enum the input uses, and which record an instance is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    pub records: Vec<RecordSchema>,
    pub enums: Vec<EnumSchema>,
    /// Index into `records` of the instance record.
    pub input: u32,
}

impl Schema {
    pub fn input_record(&self) -> Option<&RecordSchema> {
        self.records.get(self.input as usize)
    }

    /// Checks that every type reference and the input index are in range and every
    /// tensor's element count fits in u64: what a loaded file must satisfy before use.
    pub fn check(&self) -> Result<(), String> {
        if self.input_record().is_none() {
            return Err(format!("input record #{} does not exist", self.input));
        }
        // Names as the text form needs them: types unique and not built-in, fields and
        // variants unique within their record or enum.
        let mut types = HashSet::new();
        for name in self.records.iter().map(|r| &r.name).chain(self.enums.iter().map(|e| &e.name)) {
            if ["int", "bool", "f32"].contains(&name.as_str()) || !types.insert(name.as_str()) {
                return Err(format!("type `{name}` is declared twice or shadows a built-in type"));
            }
        }
        let lists = self
            .records
            .iter()
            .map(|r| (&r.name, &r.fields))
            .chain(self.enums.iter().flat_map(|e| e.variants.iter().map(|v| (&v.name, &v.fields))));
        for (owner, fields) in lists {
            let mut seen = HashSet::new();
            if let Some(f) = fields.iter().find(|f| !seen.insert(f.name.as_str())) {
                return Err(format!("`{owner}` has two fields named `{}`", f.name));
            }
        }
        for e in &self.enums {
            let mut seen = HashSet::new();
            if let Some(v) = e.variants.iter().find(|v| !seen.insert(v.name.as_str())) {
                return Err(format!("enum `{}` has two variants named `{}`", e.name, v.name));
            }
        }
        let fields = self
            .records
            .iter()
            .flat_map(|r| &r.fields)
            .chain(self.enums.iter().flat_map(|e| e.variants.iter().flat_map(|v| &v.fields)));
        for field in fields {
            self.check_ty(&field.ty).map_err(|m| format!("field `{}`: {m}", field.name))?;
        }
        Ok(())
    }

    fn check_ty(&self, ty: &DataTy) -> Result<(), String> {
        match ty {
            DataTy::Int | DataTy::Bool => Ok(()),
            DataTy::F32(dims) => match dims.iter().try_fold(1u64, |n, d| n.checked_mul(*d)) {
                Some(_) => Ok(()),
                None => Err("a tensor with more elements than fit in 64 bits".into()),
            },
            DataTy::Seq(t) => self.check_ty(t),
            DataTy::Tuple(ts) => ts.iter().try_for_each(|t| self.check_ty(t)),
            DataTy::Record(r) if (*r as usize) < self.records.len() => Ok(()),
            DataTy::Enum(e) if (*e as usize) < self.enums.len() => Ok(()),
            DataTy::Record(r) => Err(format!("record #{r} does not exist")),
            DataTy::Enum(e) => Err(format!("enum #{e} does not exist")),
        }
    }

    /// Whether enum `id` contains itself (directly or through other types): a tree, which
    /// the runtime flattens into nodes numbered in pre-order (see `docs/IR.md`).
    pub fn is_recursive(&self, id: u32) -> bool {
        let mut seen = vec![false; self.records.len() + self.enums.len()];
        let Some(e) = self.enums.get(id as usize) else { return false };
        e.variants.iter().flat_map(|v| &v.fields).any(|f| self.reaches(&f.ty, id, &mut seen))
    }

    fn reaches(&self, ty: &DataTy, target: u32, seen: &mut [bool]) -> bool {
        match ty {
            DataTy::Int | DataTy::Bool | DataTy::F32(_) => false,
            DataTy::Seq(t) => self.reaches(t, target, seen),
            DataTy::Tuple(ts) => ts.iter().any(|t| self.reaches(t, target, seen)),
            DataTy::Record(r) => {
                let slot = *r as usize;
                if seen.get(slot).copied().unwrap_or(true) {
                    return false;
                }
                seen[slot] = true;
                self.records.get(slot).is_some_and(|r| r.fields.iter().any(|f| self.reaches(&f.ty, target, seen)))
            }
            DataTy::Enum(e) => {
                if *e == target {
                    return true;
                }
                let slot = self.records.len() + *e as usize;
                if seen.get(slot).copied().unwrap_or(true) {
                    return false;
                }
                seen[slot] = true;
                self.enums.get(*e as usize).is_some_and(|e| {
                    e.variants.iter().flat_map(|v| &v.fields).any(|f| self.reaches(&f.ty, target, seen))
                })
            }
        }
    }

    /// The global *site* number of field `field` of variant `variant` of enum `id`: fields
    /// of all variants numbered in declaration order. A tree node records the site it hangs
    /// from in its parent (`$site`), which routes a recursive call's result to its caller.
    pub fn site(&self, id: u32, variant: u32, field: u32) -> Option<u32> {
        let e = self.enums.get(id as usize)?;
        let before: usize = e.variants.get(..variant as usize)?.iter().map(|v| v.fields.len()).sum();
        ((field as usize) < e.variants.get(variant as usize)?.fields.len()).then_some((before + field as usize) as u32)
    }

    /// The number of sites of enum `id` (the fields of all its variants).
    pub fn site_count(&self, id: u32) -> u32 {
        self.enums.get(id as usize).map_or(0, |e| e.variants.iter().map(|v| v.fields.len() as u32).sum())
    }

    /// The type written as in the text form (`[int]`, `f32[64]`, `Tree`).
    pub fn ty_name(&self, ty: &DataTy) -> String {
        match ty {
            DataTy::Int => "int".into(),
            DataTy::Bool => "bool".into(),
            DataTy::F32(dims) if dims.is_empty() => "f32".into(),
            DataTy::F32(dims) => {
                let parts: Vec<String> = dims.iter().map(u64::to_string).collect();
                format!("f32[{}]", parts.join(", "))
            }
            DataTy::Seq(t) => format!("[{}]", self.ty_name(t)),
            DataTy::Tuple(ts) => {
                let parts: Vec<String> = ts.iter().map(|t| self.ty_name(t)).collect();
                format!("({})", parts.join(", "))
            }
            // Quoted as in the declarations when the name is not an identifier.
            DataTy::Record(r) => {
                self.records.get(*r as usize).map_or_else(|| format!("record#{r}"), |r| field_name(&r.name))
            }
            DataTy::Enum(e) => self.enums.get(*e as usize).map_or_else(|| format!("enum#{e}"), |e| field_name(&e.name)),
        }
    }

    fn fields_text(&self, fields: &[FieldSchema]) -> String {
        let parts: Vec<String> =
            fields.iter().map(|f| format!("{}: {}", field_name(&f.name), self.ty_name(&f.ty))).collect();
        if parts.is_empty() {
            "{}".into()
        } else {
            format!("{{ {} }}", parts.join(", "))
        }
    }
}

impl fmt::Display for Schema {
    /// The schema's lines in the text form, each indented by two spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.records {
            writeln!(f, "  record {} {}", field_name(&r.name), self.fields_text(&r.fields))?;
        }
        for e in &self.enums {
            let variants: Vec<String> =
                e.variants.iter().map(|v| format!("{} {}", field_name(&v.name), self.fields_text(&v.fields))).collect();
            writeln!(f, "  enum {} {{ {} }}", field_name(&e.name), variants.join(", "))?;
        }
        if let Some(r) = self.input_record() {
            writeln!(f, "  input {}", field_name(&r.name))?;
        }
        Ok(())
    }
}
