//! Reading the input schema's lines (`record`, `enum`, `input`) of the text form. Type
//! names may refer to types declared on later lines, so names are resolved at the end.

use super::cursor::{Cursor, PResult, ParseError};
use crate::schema::{DataTy, EnumSchema, FieldSchema, RecordSchema, Schema, VariantSchema};
use std::collections::HashMap;

/// A type as written, before names are resolved.
enum Written {
    Int,
    Bool,
    F32(Vec<u64>),
    Seq(Box<Written>),
    Tuple(Vec<Written>),
    Named { name: String, line: usize, col: usize },
}

struct WrittenField {
    name: String,
    ty: Written,
}

/// A name with its fields as written: a record, or a variant of an enum.
type WrittenFields = (String, Vec<WrittenField>);

#[derive(Default)]
pub(super) struct TypesParser {
    records: Vec<WrittenFields>,
    enums: Vec<(String, Vec<WrittenFields>)>,
    input: Option<(String, usize, usize)>,
    names: HashMap<String, DataTy>,
    /// Where the first schema line is, for an error about the schema as a whole.
    first_line: Option<(usize, usize)>,
}

/// Deepest nesting of `[..]` and `(..)` in one type; deeper text is rejected, so that
/// hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 32;

impl TypesParser {
    pub(super) fn line(&mut self, c: &mut Cursor) -> PResult<()> {
        c.skip_spaces();
        let at = c.pos();
        self.first_line.get_or_insert((c.line(), at + 1));
        if self.input.is_some() {
            return Err(c.error_at(at, "the schema ends with its `input` line"));
        }
        if c.eat_word("record") {
            let name = self.declare(c, |p| DataTy::Record(p.records.len() as u32))?;
            let fields = fields(c)?;
            self.records.push((name, fields));
        } else if c.eat_word("enum") {
            let name = self.declare(c, |p| DataTy::Enum(p.enums.len() as u32))?;
            c.expect("{")?;
            let mut variants = Vec::new();
            if !c.eat("}") {
                loop {
                    let variant = c.name("a variant name")?;
                    variants.push((variant, fields(c)?));
                    if !c.eat(",") {
                        c.expect("}")?;
                        break;
                    }
                }
            }
            self.enums.push((name, variants));
        } else if c.eat_word("input") {
            c.skip_spaces();
            let col = c.pos() + 1;
            let name = c.name("the input record's name")?;
            self.input = Some((name, c.line(), col));
        } else {
            return Err(c.expected("`record`, `enum` or `input`"));
        }
        Ok(())
    }

    fn declare(&mut self, c: &mut Cursor, ty: impl Fn(&TypesParser) -> DataTy) -> PResult<String> {
        c.skip_spaces();
        let at = c.pos();
        let name = c.name("a type name")?;
        if self.names.contains_key(&name) || ["int", "bool", "f32"].contains(&name.as_str()) {
            return Err(c.error_at(at, format!("type `{name}` is declared twice")));
        }
        let id = ty(self);
        self.names.insert(name.clone(), id);
        Ok(name)
    }

    /// The schema, or `None` when the text has no schema lines.
    pub(super) fn finish(self) -> PResult<Option<Schema>> {
        let Some((input, line, col)) = &self.input else {
            let first = self
                .records
                .first()
                .map(|(name, _)| ("record", name))
                .or(self.enums.first().map(|(name, _)| ("enum", name)));
            if let Some((kind, name)) = first {
                let (line, col) = self.first_line.unwrap_or((1, 1));
                return Err(ParseError { line, col, message: format!("{kind} `{name}` but no `input` line") });
            }
            return Ok(None);
        };
        let Some(DataTy::Record(input_id)) = self.names.get(input) else {
            return Err(ParseError { line: *line, col: *col, message: format!("no record `{input}`") });
        };
        let resolve_fields = |fields: &[WrittenField]| -> PResult<Vec<FieldSchema>> {
            fields.iter().map(|f| Ok(FieldSchema { name: f.name.clone(), ty: self.resolve(&f.ty)? })).collect()
        };
        let records = self
            .records
            .iter()
            .map(|(name, fields)| Ok(RecordSchema { name: name.clone(), fields: resolve_fields(fields)? }))
            .collect::<PResult<_>>()?;
        let enums = self
            .enums
            .iter()
            .map(|(name, variants)| {
                let variants = variants
                    .iter()
                    .map(|(v, fields)| Ok(VariantSchema { name: v.clone(), fields: resolve_fields(fields)? }))
                    .collect::<PResult<_>>()?;
                Ok(EnumSchema { name: name.clone(), variants })
            })
            .collect::<PResult<_>>()?;
        Ok(Some(Schema { records, enums, input: *input_id }))
    }

    fn resolve(&self, ty: &Written) -> PResult<DataTy> {
        Ok(match ty {
            Written::Int => DataTy::Int,
            Written::Bool => DataTy::Bool,
            Written::F32(dims) => DataTy::F32(dims.clone()),
            Written::Seq(t) => DataTy::Seq(Box::new(self.resolve(t)?)),
            Written::Tuple(ts) => DataTy::Tuple(ts.iter().map(|t| self.resolve(t)).collect::<PResult<_>>()?),
            Written::Named { name, line, col } => self.names.get(name).cloned().ok_or_else(|| ParseError {
                line: *line,
                col: *col,
                message: format!("no type `{name}`"),
            })?,
        })
    }
}

/// `{ name: type, ... }`.
fn fields(c: &mut Cursor) -> PResult<Vec<WrittenField>> {
    c.expect("{")?;
    let mut out = Vec::new();
    if c.eat("}") {
        return Ok(out);
    }
    loop {
        let name = c.name("a field name")?;
        c.expect(":")?;
        out.push(WrittenField { name, ty: written_ty(c, 0)? });
        if !c.eat(",") {
            c.expect("}")?;
            return Ok(out);
        }
    }
}

fn written_ty(c: &mut Cursor, depth: usize) -> PResult<Written> {
    c.skip_spaces();
    let at = c.pos();
    if depth > MAX_DEPTH {
        return Err(c.error_at(at, "type nested too deeply"));
    }
    if c.eat("[") {
        let elem = written_ty(c, depth + 1)?;
        c.expect("]")?;
        return Ok(Written::Seq(Box::new(elem)));
    }
    if c.eat("(") {
        let mut parts = Vec::new();
        if !c.eat(")") {
            loop {
                parts.push(written_ty(c, depth + 1)?);
                if !c.eat(",") {
                    c.expect(")")?;
                    break;
                }
            }
        }
        return Ok(Written::Tuple(parts));
    }
    if c.eat_word("int") {
        return Ok(Written::Int);
    }
    if c.eat_word("bool") {
        return Ok(Written::Bool);
    }
    if c.eat_word("f32") {
        c.reset(at);
        return match super::parse::payload_ty(c)? {
            crate::PayloadTy::F32(dims) => Ok(Written::F32(dims)),
            crate::PayloadTy::Unit | crate::PayloadTy::Batch(_) => Err(c.error_at(at, "expected a data type")),
        };
    }
    let name = c.name("a type")?;
    Ok(Written::Named { name, line: c.line(), col: at + 1 })
}
