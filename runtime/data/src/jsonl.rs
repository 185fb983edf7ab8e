//! JSON Lines: one instance of the input record per line, as a JSON object with the
//! schema's field names.
//!
//! | type | JSON |
//! |---|---|
//! | `int` | an integer (`3`; `3.0` is not an int) |
//! | `bool` | `true` / `false` |
//! | `f32` | a number |
//! | `f32[a, b]` | nested arrays of numbers of exactly that shape |
//! | `[T]` | an array |
//! | `(T, U)` | an array of exactly that length |
//! | a record | an object with exactly its fields (missing and unknown fields are errors) |
//! | an enum | externally tagged: `{"Leaf": {"word": 3, "label": 2}}`; a variant without fields may also be `"Empty"` |
//!
//! Blank lines are skipped. An object that repeats a key is an error naming the key. serde_json refuses JSON nested deeper than 128 levels, so a tree
//! read from JSON Lines can be about 60 levels deep (each level is two JSON objects); the
//! PTB loader reads deeper trees. The writer ([`write_line`]) produces what [`parse`] reads.

use crate::error::excerpt;
use crate::instance::{describe, expected, push_field, MAX_NESTING};
use crate::lines::{Line, Lines};
use crate::{DataError, DataErrorKind, Loaded, Tensor, Value};
use amp_ir::{DataTy, Schema};
use serde_json::Value as Json;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Options of the JSON Lines loader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JsonlOptions {
    /// Skip bad lines (and count them) instead of failing on the first one.
    pub skip_bad: bool,
    /// Threads that parse a large file (0: as many as the machine runs at once, at most
    /// 8). Whatever the count, the outcome is the same.
    pub threads: usize,
    /// Read only the first this many instances (no later line is parsed).
    pub limit: Option<usize>,
}

/// Reads the instances in `path`, line by line (see [`read`]).
pub fn load(schema: &Schema, path: &Path, options: &JsonlOptions) -> Result<Loaded, DataError> {
    let file = path.display().to_string();
    read(schema, crate::lines::open(path)?, &file, options, &[])
}

/// Reads the instances in `text`, naming `file` in errors (see [`read`]).
pub fn parse(schema: &Schema, text: &[u8], file: &str, options: &JsonlOptions) -> Result<Loaded, DataError> {
    parse_ignoring(schema, text, file, options, &[])
}

/// [`parse`], skipping the keys `ignored` wherever an object's record or variant has no
/// such field (inference reads data with its labels, which the schema it reads with lacks:
/// see [`crate::unlabeled`]).
pub fn parse_ignoring(
    schema: &Schema,
    text: &[u8],
    file: &str,
    options: &JsonlOptions,
    ignored: &[String],
) -> Result<Loaded, DataError> {
    read(schema, Lines::of_bytes(text), file, options, ignored)
}

/// Reads the instances of `lines`, naming `file` in errors, skipping the keys `ignored`
/// as [`parse_ignoring`] does.
///
/// The lines are taken in rounds of at most [`ROUND_LINES`] non-blank lines, each parsed
/// on several threads when large, a contiguous share of the lines each; the outcomes are
/// then taken in file order, so what is kept, skipped or reported is what one thread
/// would give (the first bad line in the file fails the load). A thread stops early once
/// an earlier share has failed. Only a round's text is held at a time.
///
/// With a limit of N instances, no line after the N-th kept instance is read: each round
/// takes as many more non-blank lines as instances are still wanted (each such line gives
/// one instance, one skip or the error), so a bad line after them is never seen and the
/// work done is that of the lines taken.
pub fn read(
    schema: &Schema,
    lines: impl Iterator<Item = Line>,
    file: &str,
    options: &JsonlOptions,
    ignored: &[String],
) -> Result<Loaded, DataError> {
    schema.check().map_err(|m| DataError::schema(m).in_file(file))?;
    let mut lines = lines.filter(|(_, line)| !matches!(line, Ok(line) if line.trim().is_empty()));
    let mut loaded = Loaded::default();
    loop {
        let wanted = options.limit.map_or(usize::MAX, |n| n.saturating_sub(loaded.instances.len()));
        if wanted == 0 {
            break;
        }
        let round: Vec<Line> = lines.by_ref().take(wanted.min(ROUND_LINES)).collect();
        if round.is_empty() {
            break;
        }
        for outcome in parse_lines(schema, &round, file, options, ignored) {
            loaded.take(outcome, options.skip_bad)?;
        }
    }
    Ok(loaded)
}

/// The most non-blank lines read before they are parsed.
pub const ROUND_LINES: usize = MAX_THREADS * LINES_PER_THREAD * 4;

/// The outcomes of non-blank `lines`, in order, up to the first that fails the load: on
/// several threads when there are many.
fn parse_lines(
    schema: &Schema,
    lines: &[Line],
    file: &str,
    options: &JsonlOptions,
    ignored: &[String],
) -> Vec<Result<Value, DataError>> {
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS),
        n => n,
    };
    let share = lines.len().div_ceil(threads).max(LINES_PER_THREAD);
    let failed = AtomicUsize::new(usize::MAX);
    let parse_share = |(index, chunk): (usize, &[Line])| {
        let mut outcomes = Vec::with_capacity(chunk.len());
        for (number, line) in chunk {
            if failed.load(Ordering::Relaxed) < index {
                break;
            }
            let outcome = match line {
                Ok(line) => read_line(schema, line, ignored),
                Err(e) => Err(e.clone()),
            };
            let outcome = outcome.map_err(|e| e.at_line(*number).in_file(file));
            let fatal = outcome.as_ref().is_err_and(|e| e.fails_load(options.skip_bad));
            outcomes.push(outcome);
            if fatal {
                failed.fetch_min(index, Ordering::Relaxed);
                break;
            }
        }
        outcomes
    };
    if lines.len() <= share {
        return parse_share((0, lines));
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            lines.chunks(share).enumerate().map(|chunk| scope.spawn(move || parse_share(chunk))).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

/// By default at most this many threads parse one file; each takes at least this many
/// lines.
const MAX_THREADS: usize = 8;
const LINES_PER_THREAD: usize = 2048;

/// One instance from one line of JSON.
pub fn parse_line(schema: &Schema, line: &str) -> Result<Value, DataError> {
    read_line(schema, line, &[])
}

fn read_line(schema: &Schema, line: &str, ignored: &[String]) -> Result<Value, DataError> {
    // Strict: a key given twice is an error, not the last one silently.
    let json: Json = crate::strict_json::from_str(line).map_err(|e| DataError::syntax(format!("invalid JSON: {e}")))?;
    Reader { schema, ignored }.value(&json, &DataTy::Record(schema.input), &mut String::new(), 0)
}

/// The JSON line of one instance (without the newline).
pub fn write_line(schema: &Schema, value: &Value) -> Result<String, DataError> {
    let mut out = String::new();
    Writer { schema, out: &mut out }.value(value, &DataTy::Record(schema.input), &mut String::new(), 0)?;
    Ok(out)
}

/// The JSON Lines text of several instances, each line ending in `\n`.
pub fn write(schema: &Schema, values: &[Value]) -> Result<String, DataError> {
    let mut out = String::new();
    for value in values {
        out.push_str(&write_line(schema, value)?);
        out.push('\n');
    }
    Ok(out)
}

/// Writes the instances to `path` (through a temporary file, so a reader never sees half).
pub fn save(schema: &Schema, path: &Path, values: &[Value]) -> Result<(), DataError> {
    let text = write(schema, values)?;
    let name = path.display().to_string();
    let temp = path.with_extension("jsonl.tmp");
    std::fs::write(&temp, text).map_err(|e| DataError::io(&name, &e))?;
    std::fs::rename(&temp, path).map_err(|e| DataError::io(&name, &e))
}

/// `found ...` for a JSON value: its text, shortened.
fn found(json: &Json) -> String {
    match json {
        Json::Array(items) => format!("an array of {}", items.len()),
        Json::Object(_) => "an object".into(),
        other => excerpt(&other.to_string()),
    }
}

struct Reader<'s> {
    schema: &'s Schema,
    /// Keys skipped when the object's type has no such field.
    ignored: &'s [String],
}

impl Reader<'_> {
    fn value(&self, json: &Json, ty: &DataTy, path: &mut String, depth: usize) -> Result<Value, DataError> {
        if depth > MAX_NESTING {
            return Err(DataError::new(DataErrorKind::TooDeep { limit: MAX_NESTING }).in_field(path.clone()));
        }
        let mismatch =
            |path: &String| DataError::mismatch(expected(self.schema, ty), found(json)).in_field(path.clone());
        let mark = path.len();
        match ty {
            DataTy::Int => json.as_i64().map(Value::Int).ok_or_else(|| mismatch(path)),
            DataTy::Bool => json.as_bool().map(Value::Bool).ok_or_else(|| mismatch(path)),
            DataTy::F32(dims) if dims.len() > MAX_NESTING => {
                Err(DataError::new(DataErrorKind::TooDeep { limit: MAX_NESTING }).in_field(path.clone()))
            }
            DataTy::F32(dims) => {
                let mut data = Vec::new();
                self.tensor(json, dims, &mut data, path)?;
                let shape = dims.iter().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).collect();
                Tensor::new(shape, data).map(Value::Tensor).ok_or_else(|| mismatch(path))
            }
            DataTy::Seq(item) => {
                let Json::Array(items) = json else { return Err(mismatch(path)) };
                let mut out = Vec::with_capacity(items.len());
                for (i, json) in items.iter().enumerate() {
                    let _ = write!(path, "[{i}]");
                    out.push(self.value(json, item, path, depth + 1)?);
                    path.truncate(mark);
                }
                Ok(Value::Seq(out))
            }
            DataTy::Tuple(tys) => {
                let Json::Array(items) = json else { return Err(mismatch(path)) };
                if items.len() != tys.len() {
                    return Err(mismatch(path));
                }
                let mut out = Vec::with_capacity(items.len());
                for (i, (json, ty)) in items.iter().zip(tys).enumerate() {
                    let _ = write!(path, "[{i}]");
                    out.push(self.value(json, ty, path, depth + 1)?);
                    path.truncate(mark);
                }
                Ok(Value::Tuple(out))
            }
            DataTy::Record(r) => {
                let record = self.schema.records.get(*r as usize).ok_or_else(|| mismatch(path))?;
                let fields = self.fields(json, &record.name, &record.fields, path, depth)?;
                Ok(Value::Record(fields))
            }
            DataTy::Enum(e) => {
                let enumeration = self.schema.enums.get(*e as usize).ok_or_else(|| mismatch(path))?;
                let (name, body) = match json {
                    Json::String(name) => (name.as_str(), None),
                    Json::Object(map) if map.len() == 1 => match map.iter().next() {
                        Some((name, body)) => (name.as_str(), Some(body)),
                        None => return Err(mismatch(path)),
                    },
                    _ => {
                        let expected = format!("an object with one key naming a variant of {}", enumeration.name);
                        return Err(DataError::mismatch(expected, found(json)).in_field(path.clone()));
                    }
                };
                let Some(tag) = enumeration.variants.iter().position(|v| v.name == name) else {
                    let known = enumeration.variants.iter().map(|v| v.name.clone()).collect();
                    let kind = DataErrorKind::UnknownVariant {
                        enumeration: enumeration.name.clone(),
                        name: excerpt(name),
                        known,
                    };
                    return Err(DataError::new(kind).in_field(path.clone()));
                };
                let variant = &enumeration.variants[tag];
                let fields = match body {
                    None if variant.fields.is_empty() => Vec::new(),
                    None => return Err(mismatch(path)),
                    Some(body) => {
                        let owner = format!("{}::{}", enumeration.name, variant.name);
                        self.fields(body, &owner, &variant.fields, path, depth)?
                    }
                };
                Ok(Value::Variant { tag: tag as u32, fields })
            }
        }
    }

    /// The fields of a record or variant from a JSON object: exactly the schema's fields.
    fn fields(
        &self,
        json: &Json,
        owner: &str,
        fields: &[amp_ir::FieldSchema],
        path: &mut String,
        depth: usize,
    ) -> Result<Vec<Value>, DataError> {
        let Json::Object(map) = json else {
            return Err(DataError::mismatch(format!("an object with the fields of {owner}"), found(json))
                .in_field(path.clone()));
        };
        let mark = path.len();
        let unknown = |k: &&String| !fields.iter().any(|f| f.name == **k) && !self.ignored.contains(k);
        if let Some(unknown) = map.keys().find(unknown) {
            let known = fields.iter().map(|f| f.name.clone()).collect();
            push_field(path, &excerpt(unknown));
            return Err(
                DataError::new(DataErrorKind::UnknownField { owner: owner.to_string(), known }).in_field(path.clone())
            );
        }
        let mut out = Vec::with_capacity(fields.len());
        for field in fields {
            push_field(path, &field.name);
            let Some(json) = map.get(&field.name) else {
                return Err(DataError::new(DataErrorKind::MissingField).in_field(path.clone()));
            };
            out.push(self.value(json, &field.ty, path, depth + 1)?);
            path.truncate(mark);
        }
        Ok(out)
    }

    /// Appends the numbers of a tensor of shape `dims`, row-major.
    /// The numbers of a tensor of shape `dims`, in row-major order, appended to `out`; on a
    /// mismatch, the error names the element's path. The values are read without paths
    /// first (formatting an index per element was most of the time of loading a file of
    /// tensors) and again, tracking them, only when that fails.
    fn tensor(&self, json: &Json, dims: &[u64], out: &mut Vec<f32>, path: &mut String) -> Result<(), DataError> {
        let mark = out.len();
        if tensor_values(json, dims, out) {
            return Ok(());
        }
        out.truncate(mark);
        self.located_tensor(json, dims, out, path)
    }

    fn located_tensor(
        &self,
        json: &Json,
        dims: &[u64],
        out: &mut Vec<f32>,
        path: &mut String,
    ) -> Result<(), DataError> {
        let Some((&first, rest)) = dims.split_first() else {
            let number = json.as_f64().map(|x| x as f32).filter(|x| x.is_finite());
            let Some(number) = number else {
                return Err(DataError::mismatch("a number in the f32 range", found(json)).in_field(path.clone()));
            };
            out.push(number);
            return Ok(());
        };
        let items = match json {
            Json::Array(items) if items.len() as u64 == first => items,
            _ => {
                let expected = format!("an array of {first}");
                return Err(DataError::mismatch(expected, found(json)).in_field(path.clone()));
            }
        };
        let mark = path.len();
        for (i, json) in items.iter().enumerate() {
            let _ = write!(path, "[{i}]");
            self.located_tensor(json, rest, out, path)?;
            path.truncate(mark);
        }
        Ok(())
    }
}

/// [`Reader::tensor`]'s values without paths: false on the first mismatch (a value that
/// is no finite f32, an array of another length).
fn tensor_values(json: &Json, dims: &[u64], out: &mut Vec<f32>) -> bool {
    let Some((&first, rest)) = dims.split_first() else {
        return match json.as_f64().map(|x| x as f32) {
            Some(x) if x.is_finite() => {
                out.push(x);
                true
            }
            _ => false,
        };
    };
    match json {
        Json::Array(items) if items.len() as u64 == first => items.iter().all(|item| tensor_values(item, rest, out)),
        _ => false,
    }
}

struct Writer<'s, 'o> {
    schema: &'s Schema,
    out: &'o mut String,
}

impl Writer<'_, '_> {
    fn value(&mut self, value: &Value, ty: &DataTy, path: &mut String, depth: usize) -> Result<(), DataError> {
        if depth > MAX_NESTING {
            return Err(DataError::new(DataErrorKind::TooDeep { limit: MAX_NESTING }).in_field(path.clone()));
        }
        let schema = self.schema;
        let mismatch =
            |path: &String| DataError::mismatch(expected(schema, ty), describe(value)).in_field(path.clone());
        let mark = path.len();
        match (ty, value) {
            (DataTy::Int, Value::Int(i)) => {
                let _ = write!(self.out, "{i}");
            }
            (DataTy::Bool, Value::Bool(b)) => {
                let _ = write!(self.out, "{b}");
            }
            (DataTy::F32(dims), Value::Tensor(t)) => {
                let fits = dims.len() == t.shape.len()
                    && dims.len() <= MAX_NESTING
                    && dims.iter().zip(&t.shape).all(|(&d, &s)| d == s as u64)
                    && t.elements() == Some(t.data.len());
                if !fits {
                    return Err(mismatch(path));
                }
                let mut data = t.data.iter();
                self.tensor(&t.shape, &mut data, path)?;
            }
            (DataTy::Seq(item), Value::Seq(items)) => {
                self.out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let _ = write!(path, "[{i}]");
                    self.value(v, item, path, depth + 1)?;
                    path.truncate(mark);
                }
                self.out.push(']');
            }
            (DataTy::Tuple(tys), Value::Tuple(items)) if tys.len() == items.len() => {
                self.out.push('[');
                for (i, (v, t)) in items.iter().zip(tys).enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let _ = write!(path, "[{i}]");
                    self.value(v, t, path, depth + 1)?;
                    path.truncate(mark);
                }
                self.out.push(']');
            }
            (DataTy::Record(r), Value::Record(items)) => {
                let record = schema.records.get(*r as usize).filter(|r| r.fields.len() == items.len());
                let record = record.ok_or_else(|| mismatch(path))?;
                self.fields(&record.fields, items, path, depth)?;
            }
            (DataTy::Enum(e), Value::Variant { tag, fields }) => {
                let variant = schema.enums.get(*e as usize).and_then(|e| e.variants.get(*tag as usize));
                let variant = variant.filter(|v| v.fields.len() == fields.len()).ok_or_else(|| mismatch(path))?;
                self.out.push('{');
                self.string(&variant.name);
                self.out.push(':');
                self.fields(&variant.fields, fields, path, depth)?;
                self.out.push('}');
            }
            _ => return Err(mismatch(path)),
        }
        Ok(())
    }

    fn fields(
        &mut self,
        schema: &[amp_ir::FieldSchema],
        values: &[Value],
        path: &mut String,
        depth: usize,
    ) -> Result<(), DataError> {
        let mark = path.len();
        self.out.push('{');
        for (i, (field, value)) in schema.iter().zip(values).enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.string(&field.name);
            self.out.push(':');
            push_field(path, &field.name);
            self.value(value, &field.ty, path, depth + 1)?;
            path.truncate(mark);
        }
        self.out.push('}');
        Ok(())
    }

    fn string(&mut self, text: &str) {
        // Serialising a string cannot fail; the fallback keeps the writer total anyway.
        self.out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()));
    }

    fn tensor(
        &mut self,
        shape: &[usize],
        data: &mut std::slice::Iter<'_, f32>,
        path: &mut String,
    ) -> Result<(), DataError> {
        let Some((&first, rest)) = shape.split_first() else {
            let x = data.next().copied().unwrap_or(f32::NAN);
            if !x.is_finite() {
                return Err(DataError::mismatch("a finite number", format!("{x}")).in_field(path.clone()));
            }
            // Display is the shortest text that reads back as the same f32.
            let _ = write!(self.out, "{x}");
            return Ok(());
        };
        let mark = path.len();
        self.out.push('[');
        for i in 0..first {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(path, "[{i}]");
            self.tensor(rest, data, path)?;
            path.truncate(mark);
        }
        self.out.push(']');
        Ok(())
    }
}
