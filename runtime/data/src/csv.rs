//! CSV rows onto fixed-size records, e.g. the 8×8 digits (`64 pixels, label` per row)
//! onto `record Digit { pixels: f32[64], label: int }`.
//!
//! The record's fields take the columns in order: an `f32[a, b]` field takes `a·b`
//! columns (row-major), an `int` or `bool` field one; tuples and nested records take their
//! parts' columns in order. Sequences and enums have no fixed size and do not fit. f32
//! columns are multiplied by [`CsvOptions::scale`]. The first non-blank line is a header,
//! and skipped, when none of its cells is a number. No quoting: cells are split at the
//! delimiter and trimmed. Blank lines are skipped.

use crate::error::excerpt;
use crate::instance::{push_field, MAX_NESTING};
use crate::lines::{Line, Lines};
use crate::{DataError, DataErrorKind, Loaded, Tensor, Value};
use amp_ir::{DataTy, Schema};
use std::path::Path;

/// The most columns a record may take (bounds what a schema makes the loader allocate).
pub const MAX_COLUMNS: usize = 1 << 20;

/// Options of the CSV loader.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvOptions {
    /// Skip bad rows (and count them) instead of failing on the first one.
    pub skip_bad: bool,
    /// Every f32 column is multiplied by this (e.g. `1/16` for 0–16 pixels).
    pub scale: f32,
    /// The cell separator (`,`).
    pub delimiter: char,
    /// Read only the first this many rows (the rest of the file is not looked at).
    pub limit: Option<usize>,
}

impl Default for CsvOptions {
    fn default() -> CsvOptions {
        CsvOptions { skip_bad: false, scale: 1.0, delimiter: ',', limit: None }
    }
}

/// Reads the rows of `path`, line by line (see [`read`]).
pub fn load(schema: &Schema, path: &Path, options: &CsvOptions) -> Result<Loaded, DataError> {
    read(schema, crate::lines::open(path)?, &path.display().to_string(), options)
}

/// Reads the rows of `text`, naming `file` in errors.
pub fn parse(schema: &Schema, text: &[u8], file: &str, options: &CsvOptions) -> Result<Loaded, DataError> {
    read(schema, Lines::of_bytes(text), file, options)
}

/// Reads the rows of `lines`, naming `file` in errors; with a limit, no line after the
/// last row it takes is read.
pub fn read(
    schema: &Schema,
    lines: impl Iterator<Item = Line>,
    file: &str,
    options: &CsvOptions,
) -> Result<Loaded, DataError> {
    if !options.scale.is_finite() {
        // Otherwise every f32 cell would be reported as bad data.
        let message = format!("the scale {} is not a finite number", options.scale);
        return Err(DataError::new(DataErrorKind::Options(message)).in_file(file));
    }
    let layout = Layout::of(schema).map_err(|e| e.in_file(file))?;
    let mut loaded = Loaded::default();
    let mut first = true;
    let mut lines = lines;
    // The limit is checked before a line is taken: none after the last row is read.
    while !loaded.full(options.limit) {
        let Some((number, line)) = lines.next() else { break };
        let outcome = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => {
                let cells: Vec<&str> = line.split(options.delimiter).map(str::trim).collect();
                let header = first && !cells.iter().any(|c| c.parse::<f64>().is_ok());
                if std::mem::replace(&mut first, false) && header {
                    continue;
                }
                layout.row(&cells, options.scale)
            }
            Err(e) => Err(e),
        };
        first = false;
        loaded.take(outcome.map_err(|e| e.at_line(number).in_file(file)), options.skip_bad)?;
    }
    Ok(loaded)
}

/// The kind of one column.
/// The number of columns a row of `schema`'s records has.
pub fn columns(schema: &Schema) -> Result<usize, DataError> {
    Ok(Layout::of(schema)?.columns.len())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Column {
    Int,
    Bool,
    F32,
}

/// The columns a record takes, each with the field path it fills (for errors).
struct Layout<'s> {
    schema: &'s Schema,
    columns: Vec<(Column, String)>,
}

impl<'s> Layout<'s> {
    fn of(schema: &'s Schema) -> Result<Layout<'s>, DataError> {
        schema.check().map_err(DataError::schema)?;
        let mut layout = Layout { schema, columns: Vec::new() };
        layout.add(&DataTy::Record(schema.input), &mut String::new(), 0)?;
        Ok(layout)
    }

    fn add(&mut self, ty: &DataTy, path: &mut String, depth: usize) -> Result<(), DataError> {
        if depth > MAX_NESTING {
            return Err(DataError::schema(format!("types nested deeper than {MAX_NESTING} levels")));
        }
        let mark = path.len();
        match ty {
            DataTy::Int => self.push(Column::Int, path.clone())?,
            DataTy::Bool => self.push(Column::Bool, path.clone())?,
            DataTy::F32(dims) => {
                let count = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
                let count = count.and_then(|c| usize::try_from(c).ok()).filter(|&c| c <= MAX_COLUMNS);
                let count = count.ok_or_else(|| DataError::schema(format!("field `{path}` has too many elements")))?;
                for i in 0..count {
                    let mut name = path.clone();
                    let mut rest = i;
                    let mut indices = Vec::with_capacity(dims.len());
                    for &d in dims.iter().rev() {
                        let d = usize::try_from(d).unwrap_or(usize::MAX).max(1);
                        indices.push(rest % d);
                        rest /= d;
                    }
                    for index in indices.iter().rev() {
                        name.push_str(&format!("[{index}]"));
                    }
                    self.push(Column::F32, name)?;
                }
            }
            DataTy::Tuple(tys) => {
                for (i, ty) in tys.iter().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    self.add(ty, path, depth + 1)?;
                    path.truncate(mark);
                }
            }
            DataTy::Record(r) => {
                let record = self.schema.records.get(*r as usize).ok_or_else(|| DataError::schema("no such record"))?;
                for field in &record.fields {
                    push_field(path, &field.name);
                    self.add(&field.ty, path, depth + 1)?;
                    path.truncate(mark);
                }
            }
            DataTy::Seq(_) | DataTy::Enum(_) => {
                return Err(DataError::schema(format!(
                    "field `{path}` is a {}: CSV rows have a fixed number of columns",
                    self.schema.ty_name(ty)
                )))
            }
        }
        Ok(())
    }

    fn push(&mut self, column: Column, name: String) -> Result<(), DataError> {
        if self.columns.len() >= MAX_COLUMNS {
            return Err(DataError::schema(format!("more than {MAX_COLUMNS} columns")));
        }
        self.columns.push((column, name));
        Ok(())
    }

    /// The instance of one row.
    fn row(&self, cells: &[&str], scale: f32) -> Result<Value, DataError> {
        if cells.len() != self.columns.len() {
            return Err(DataError::mismatch(format!("{} columns", self.columns.len()), cells.len().to_string()));
        }
        let mut cells = cells.iter().zip(&self.columns);
        let value = self.value(&DataTy::Record(self.schema.input), &mut cells, scale, 0)?;
        Ok(value)
    }

    fn value<'c>(
        &self,
        ty: &DataTy,
        cells: &mut impl Iterator<Item = (&'c &'c str, &'c (Column, String))>,
        scale: f32,
        depth: usize,
    ) -> Result<Value, DataError> {
        let too_few = || DataError::syntax("too few columns");
        if depth > MAX_NESTING {
            return Err(DataError::new(DataErrorKind::TooDeep { limit: MAX_NESTING }));
        }
        Ok(match ty {
            DataTy::Int | DataTy::Bool => {
                let (cell, (column, name)) = cells.next().ok_or_else(too_few)?;
                cell_value(cell, *column).map_err(|e| e.in_field(name.clone()))?
            }
            DataTy::F32(dims) => {
                let shape: Vec<usize> = dims.iter().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).collect();
                let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(too_few)?;
                let mut data = Vec::with_capacity(count.min(MAX_COLUMNS));
                for _ in 0..count {
                    let (cell, (_, name)) = cells.next().ok_or_else(too_few)?;
                    data.push(f32_cell(cell, scale).map_err(|e| e.in_field(name.clone()))?);
                }
                Value::Tensor(Tensor::new(shape, data).ok_or_else(too_few)?)
            }
            DataTy::Tuple(tys) => {
                Value::Tuple(tys.iter().map(|t| self.value(t, cells, scale, depth + 1)).collect::<Result<_, _>>()?)
            }
            DataTy::Record(r) => {
                let record = self.schema.records.get(*r as usize).ok_or_else(|| DataError::schema("no such record"))?;
                Value::Record(
                    record
                        .fields
                        .iter()
                        .map(|f| self.value(&f.ty, cells, scale, depth + 1))
                        .collect::<Result<_, _>>()?,
                )
            }
            DataTy::Seq(_) | DataTy::Enum(_) => return Err(DataError::schema("no fixed size")),
        })
    }
}

fn found(cell: &str) -> String {
    format!("\"{}\"", excerpt(cell))
}

/// An int or bool cell.
fn cell_value(cell: &str, column: Column) -> Result<Value, DataError> {
    match column {
        Column::Int => cell.parse::<i64>().map(Value::Int).map_err(|_| DataError::mismatch("an int", found(cell))),
        Column::Bool => match cell {
            "0" | "false" => Ok(Value::Bool(false)),
            "1" | "true" => Ok(Value::Bool(true)),
            _ => Err(DataError::mismatch("a bool (0, 1, true or false)", found(cell))),
        },
        Column::F32 => Err(DataError::mismatch("an int", found(cell))),
    }
}

/// An f32 cell, scaled.
fn f32_cell(cell: &str, scale: f32) -> Result<f32, DataError> {
    match cell.parse::<f32>() {
        Ok(x) if (x * scale).is_finite() => Ok(x * scale),
        _ => Err(DataError::mismatch("a finite number", found(cell))),
    }
}
