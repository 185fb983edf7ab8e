//! SDF (MDL V2000) molecules as graphs: atoms become node kinds, bonds become edges in
//! both directions with the bond order as the edge kind, and a property of the molecule
//! becomes the class label.
//!
//! The input record must have one `[int]` field (the node kinds), one field that is a
//! sequence of a record with int fields `src`, `dst` and optionally `kind` (nothing else),
//! and at most one int field (the label), e.g. `record Graph { nodes: [int], edges: [Edge],
//! label: int }` with `record Edge { src: int, dst: int, kind: int }`.
//!
//! - Node kinds: the first `node_kinds - 1` elements of [`ELEMENTS`] (most common first:
//!   C, O, N, Cl, S, F, Br, ...) get kinds `0..`, every other element the last kind.
//! - Edge kinds: bond order − 1, clamped to `edge_kinds − 1` (V2000 order 4 is aromatic).
//! - Label: the property [`SdfOptions::label_property`] (tag matched without regard to
//!   case, since files differ: `<smiles>` vs `<SMILES>`); `(A) low`, `(B) medium`,
//!   `(C) high` give 0, 1, 2 (the letter's position), a plain integer gives itself.
//!
//! A molecule is the lines up to `$$$$`. A bad molecule is an error naming the file and
//! the line (the bad atom or bond line, or the molecule's first line); with `skip_bad` it
//! is skipped and counted.

use crate::error::excerpt;
use crate::lines::{Line, Lines, MAX_LINE_BYTES};
use crate::{DataError, DataErrorKind, Loaded, Value};
use amp_ir::{DataTy, Schema};
use std::path::Path;

/// Elements in the order they get node kinds: most common in organic molecules first.
pub const ELEMENTS: [&str; 16] = ["C", "O", "N", "Cl", "S", "F", "Br", "I", "P", "H", "B", "Si", "Se", "Na", "K", "Sn"];

/// The most atoms (and bonds) a V2000 molecule can have: three digits in the counts line.
const MAX_ATOMS: usize = 999;

/// Options of the SDF loader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdfOptions {
    /// Skip bad molecules (and count them) instead of failing on the first one.
    pub skip_bad: bool,
    /// Number of node kinds (the model's embedding size), at least 1.
    pub node_kinds: usize,
    /// Number of edge kinds, at least 1.
    pub edge_kinds: usize,
    /// The property that holds the label.
    pub label_property: String,
    /// Read only the first this many molecules (the rest of the file is not looked at).
    pub limit: Option<usize>,
}

impl Default for SdfOptions {
    /// 8 node kinds (C O N Cl S F Br, other), 3 edge kinds (single, double, triple or
    /// more), labels from `<SOL_classification>`.
    fn default() -> SdfOptions {
        SdfOptions {
            skip_bad: false,
            node_kinds: 8,
            edge_kinds: 3,
            label_property: "SOL_classification".into(),
            limit: None,
        }
    }
}

/// The node kind of an element symbol.
pub fn node_kind(symbol: &str, node_kinds: usize) -> i64 {
    let last = node_kinds.saturating_sub(1);
    let kind = ELEMENTS.iter().position(|e| *e == symbol).filter(|&k| k < last).unwrap_or(last);
    kind as i64
}

/// Reads the molecules in `path`, line by line (see [`read`]).
pub fn load(schema: &Schema, path: &Path, options: &SdfOptions) -> Result<Loaded, DataError> {
    read(schema, crate::lines::open(path)?, &path.display().to_string(), options)
}

/// Reads the molecules in `text`, naming `file` in errors.
pub fn parse(schema: &Schema, text: &[u8], file: &str, options: &SdfOptions) -> Result<Loaded, DataError> {
    read(schema, Lines::of_bytes(text), file, options)
}

/// Reads the molecules of `lines`, naming `file` in errors; with a limit, no line after
/// the `$$$$` of the last molecule it takes is read. A molecule's text is at most
/// [`MAX_LINE_BYTES`] bytes, like a line of the other formats.
pub fn read(
    schema: &Schema,
    lines: impl Iterator<Item = Line>,
    file: &str,
    options: &SdfOptions,
) -> Result<Loaded, DataError> {
    if options.node_kinds == 0 || options.edge_kinds == 0 {
        return Err(
            DataError::new(DataErrorKind::Options("node_kinds and edge_kinds must be at least 1".into())).in_file(file)
        );
    }
    let layout = GraphLayout::of(schema).map_err(|e| e.in_file(file))?;
    let mut loaded = Loaded::default();
    let mut block: Vec<Line> = Vec::new();
    let mut bytes = 0usize;
    let mut all = lines.peekable();
    // The limit is checked before a line is taken: none after the last molecule is read.
    while !loaded.full(options.limit) {
        let Some((number, line)) = all.next() else { break };
        let end = matches!(&line, Ok(l) if l.trim_end() == "$$$$");
        if !end {
            bytes = bytes.saturating_add(line.as_ref().map_or(0, |l| l.len() + 1));
            if bytes > MAX_LINE_BYTES {
                let message = format!("a molecule of more than {MAX_LINE_BYTES} bytes (the limit of a data line)");
                let first = block.first().map_or(number, |(n, _)| *n);
                return Err(DataError::new(DataErrorKind::TooLarge(message)).at_line(first).in_file(file));
            }
            block.push((number, line));
        }
        // A last molecule without `$$$$` still counts; trailing blank lines do not. (After
        // a `$$$$` nothing is looked ahead at.)
        let last = !end && all.peek().is_none();
        if end || (last && block.iter().any(|(_, l)| !matches!(l, Ok(l) if l.trim().is_empty()))) {
            let first = block.first().map_or(number, |(n, _)| *n);
            let outcome = molecule(&block, &layout, options).map_err(|e| e.at_line(first).in_file(file));
            loaded.take(outcome, options.skip_bad)?;
            block.clear();
            bytes = 0;
        }
    }
    Ok(loaded)
}

/// Where the parts of a molecule go in the schema's record.
struct GraphLayout {
    record_fields: usize,
    nodes: usize,
    edges: usize,
    label: Option<usize>,
    edge_fields: usize,
    src: usize,
    dst: usize,
    kind: Option<usize>,
}

impl GraphLayout {
    fn of(schema: &Schema) -> Result<GraphLayout, DataError> {
        schema.check().map_err(DataError::schema)?;
        let record = schema.input_record().ok_or_else(|| DataError::schema("no input record"))?;
        let explain = "a graph record has one `[int]` field (nodes), one sequence of a record with int fields \
                       `src`, `dst` and optionally `kind` (edges), and at most one int field (the label)";
        let (mut nodes, mut edges, mut label) = (None, None, None);
        for (i, field) in record.fields.iter().enumerate() {
            let slot = match &field.ty {
                DataTy::Int => &mut label,
                DataTy::Seq(item) if **item == DataTy::Int => &mut nodes,
                DataTy::Seq(item) if matches!(**item, DataTy::Record(_)) => &mut edges,
                _ => &mut None,
            };
            if !is_graph_field(&field.ty) || slot.replace(i).is_some() {
                return Err(DataError::schema(format!("field `{}` of {}: {explain}", field.name, record.name)));
            }
        }
        let (Some(nodes), Some(edges)) = (nodes, edges) else {
            return Err(DataError::schema(format!("record {}: {explain}", record.name)));
        };
        let edge = match &record.fields[edges].ty {
            DataTy::Seq(item) => match **item {
                DataTy::Record(r) => schema.records.get(r as usize),
                _ => None,
            },
            _ => None,
        };
        let edge = edge.ok_or_else(|| DataError::schema(format!("record {}: {explain}", record.name)))?;
        let position = |name: &str| edge.fields.iter().position(|f| f.name == name && f.ty == DataTy::Int);
        let (src, dst, kind) = (position("src"), position("dst"), position("kind"));
        let (Some(src), Some(dst)) = (src, dst) else {
            return Err(DataError::schema(format!("record {}: {explain}", edge.name)));
        };
        if edge.fields.len() != 2 + usize::from(kind.is_some()) {
            return Err(DataError::schema(format!("record {}: {explain}", edge.name)));
        }
        Ok(GraphLayout {
            record_fields: record.fields.len(),
            nodes,
            edges,
            label,
            edge_fields: edge.fields.len(),
            src,
            dst,
            kind,
        })
    }

    fn edge(&self, src: i64, dst: i64, kind: i64) -> Value {
        let mut fields = vec![Value::Int(0); self.edge_fields];
        fields[self.src] = Value::Int(src);
        fields[self.dst] = Value::Int(dst);
        if let Some(k) = self.kind {
            fields[k] = Value::Int(kind);
        }
        Value::Record(fields)
    }
}

fn is_graph_field(ty: &DataTy) -> bool {
    match ty {
        DataTy::Int => true,
        DataTy::Seq(item) => matches!(**item, DataTy::Int | DataTy::Record(_)),
        _ => false,
    }
}

/// The fixed-width field `[start, start + width)` of a line, trimmed.
fn column(line: &str, start: usize, width: usize) -> Option<&str> {
    line.get(start..(start + width).min(line.len())).map(str::trim).filter(|s| !s.is_empty())
}

/// One molecule from the lines of its block.
fn molecule(block: &[Line], layout: &GraphLayout, options: &SdfOptions) -> Result<Value, DataError> {
    let mut lines = Vec::with_capacity(block.len());
    for (number, line) in block {
        match line {
            Ok(line) => lines.push((*number, line.as_str())),
            Err(e) => return Err(e.clone().at_line(*number)),
        }
    }
    let Some(&(counts_line, counts)) = lines.get(3) else {
        return Err(DataError::syntax("a molecule needs a 3-line header and a counts line"));
    };
    if counts.contains("V3000") {
        return Err(DataError::invalid("V3000 molecules are not supported (only V2000)").at_line(counts_line));
    }
    let count = |start: usize, what: &str| {
        let text = column(counts, start, 3);
        match text.and_then(|t| t.parse::<usize>().ok()).filter(|&n| n <= MAX_ATOMS) {
            Some(n) => Ok(n),
            None => Err(DataError::mismatch(
                format!("the number of {what} (columns {}-{})", start + 1, start + 3),
                format!("\"{}\"", excerpt(text.unwrap_or(""))),
            )
            .at_line(counts_line)),
        }
    };
    let (atoms, bonds) = (count(0, "atoms")?, count(3, "bonds")?);
    let block_end = |what: &str| {
        let last = lines.last().map_or(counts_line, |(n, _)| *n);
        DataError::syntax(format!("the molecule ends at line {last}, before its {what}"))
    };
    let mut nodes = Vec::with_capacity(atoms);
    for i in 0..atoms {
        let &(number, line) = lines.get(4 + i).ok_or_else(|| block_end("atoms"))?;
        let symbol = if line.len() >= 34 { column(line, 31, 3) } else { line.split_whitespace().nth(3) };
        let symbol = symbol.filter(|s| s.chars().all(|c| c.is_ascii_alphabetic() || c == '*'));
        let symbol =
            symbol.ok_or_else(|| DataError::syntax("an atom line without an element symbol").at_line(number))?;
        nodes.push(Value::Int(node_kind(symbol, options.node_kinds)));
    }
    let mut edges = Vec::with_capacity(2 * bonds);
    for i in 0..bonds {
        let &(number, line) = lines.get(4 + atoms + i).ok_or_else(|| block_end("bonds"))?;
        let field = |start: usize, what: String, max: usize| {
            let text = column(line, start, 3);
            text.and_then(|t| t.parse::<usize>().ok()).filter(|&n| (1..=max).contains(&n)).ok_or_else(|| {
                DataError::mismatch(
                    format!("{what} (columns {}-{})", start + 1, start + 3),
                    format!("\"{}\"", excerpt(text.unwrap_or(""))),
                )
                .at_line(number)
            })
        };
        let a = field(0, format!("an atom number 1-{atoms}"), atoms)?;
        let b = field(3, format!("an atom number 1-{atoms}"), atoms)?;
        let order = field(6, "a bond order 1-8".into(), 8)?;
        if a == b {
            return Err(DataError::invalid(format!("a bond from atom {a} to itself")).at_line(number));
        }
        let kind = (order - 1).min(options.edge_kinds - 1) as i64;
        let (a, b) = (a as i64 - 1, b as i64 - 1);
        edges.push(layout.edge(a, b, kind));
        edges.push(layout.edge(b, a, kind));
    }
    let label = match layout.label {
        None => None,
        Some(_) => Some(label(&lines[(4 + atoms + bonds).min(lines.len())..], &options.label_property)?),
    };
    let mut record = vec![Value::Int(0); layout.record_fields];
    record[layout.nodes] = Value::Seq(nodes);
    record[layout.edges] = Value::Seq(edges);
    if let (Some(slot), Some(label)) = (layout.label, label) {
        record[slot] = Value::Int(label);
    }
    Ok(Value::Record(record))
}

/// The class in property `name` among the lines after the bond block.
fn label(lines: &[(usize, &str)], name: &str) -> Result<i64, DataError> {
    let mut rest = lines.iter();
    while let Some(&(_, line)) = rest.next() {
        let Some(header) = line.strip_prefix('>') else { continue };
        let tag = header.split_once('<').and_then(|(_, t)| t.split_once('>')).map(|(t, _)| t.trim());
        if !tag.is_some_and(|t| t.eq_ignore_ascii_case(name)) {
            continue;
        }
        let Some(&(number, value)) = rest.next() else {
            return Err(DataError::syntax(format!("property <{name}> has no value")));
        };
        let value = value.trim();
        return class(value).ok_or_else(|| {
            DataError::mismatch("a class: `(A) ...`, `(B) ...`, ... or an int", format!("\"{}\"", excerpt(value)))
                .at_line(number)
                .in_field(format!("<{name}>"))
        });
    }
    Err(DataError::new(DataErrorKind::MissingField).in_field(format!("<{name}>")))
}

/// `(A) low` → 0, `(B) ...` → 1, ...; an integer → itself.
fn class(value: &str) -> Option<i64> {
    let bytes = value.as_bytes();
    match bytes {
        [b'(', letter @ b'A'..=b'Z', b')', ..] => Some(i64::from(letter - b'A')),
        _ => value.parse().ok(),
    }
}
