//! Two printers of [`Diagnostic`]: ariadne for people, JSON lines for tools.

use crate::{Diagnostic, SourceMap, Span};
use ariadne::{Color, Config, IndexType, Label, Report, ReportKind};
use serde::Serialize;

/// Renders diagnostics the way a terminal shows them. `color` adds ANSI colours; tests and
/// snapshots use `false`.
pub fn render_human(map: &SourceMap, diagnostics: &[Diagnostic], color: bool) -> String {
    let mut out = Vec::new();
    let cache = ariadne::sources(map.files().map(|(_, f)| (f.name.clone(), f.text.clone())));
    let mut cache = cache;
    for diag in diagnostics {
        let Some(file) = map.get(diag.span.file) else {
            continue;
        };
        let kind = match diag.severity() {
            crate::Severity::Error => ReportKind::Error,
            crate::Severity::Warning => ReportKind::Warning,
        };
        let id = |span: Span| {
            let name = map.get(span.file).map_or_else(|| file.name.clone(), |f| f.name.clone());
            (name, span.range())
        };
        let primary_color = if diag.severity() == crate::Severity::Error { Color::Red } else { Color::Yellow };
        let mut primary = Label::new(id(diag.span)).with_color(primary_color).with_order(0);
        if !diag.primary_label.is_empty() {
            primary = primary.with_message(&diag.primary_label);
        }
        let mut report = Report::build(kind, id(diag.span))
            .with_config(Config::default().with_color(color).with_index_type(IndexType::Byte))
            .with_code(diag.code)
            .with_message(&diag.message)
            .with_label(primary);
        for (i, label) in diag.labels.iter().enumerate() {
            report = report.with_label(
                Label::new(id(label.span))
                    .with_message(&label.message)
                    .with_color(Color::Blue)
                    .with_order(i as i32 + 1),
            );
        }
        for note in &diag.notes {
            report = report.with_note(note);
        }
        if let Some(help) = &diag.help {
            report = report.with_help(help);
        }
        // Writing into a Vec cannot fail; a broken cache entry only loses the snippet.
        let _ = report.finish().write(&mut cache, &mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A 1-based line and column; the column counts Unicode scalar values.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct JsonLabel {
    pub file: String,
    pub byte_start: usize,
    pub byte_end: usize,
    pub start: Position,
    pub end: Position,
    pub message: String,
}

/// The JSON form of one diagnostic (`--message-format json`).
#[derive(Clone, Debug, Serialize)]
pub struct JsonDiagnostic {
    pub code: &'static str,
    pub severity: &'static str,
    pub message: String,
    pub file: String,
    pub byte_start: usize,
    pub byte_end: usize,
    pub start: Position,
    pub end: Position,
    pub labels: Vec<JsonLabel>,
    pub notes: Vec<String>,
    pub help: Option<String>,
}

fn json_label(map: &SourceMap, span: Span, message: &str) -> JsonLabel {
    let (file, start, end) = match map.get(span.file) {
        Some(f) => {
            let (sl, sc) = f.line_col(span.start as usize);
            let (el, ec) = f.line_col(span.end as usize);
            (f.name.clone(), Position { line: sl + 1, column: sc + 1 }, Position { line: el + 1, column: ec + 1 })
        }
        None => (String::new(), Position { line: 0, column: 0 }, Position { line: 0, column: 0 }),
    };
    JsonLabel {
        file,
        byte_start: span.start as usize,
        byte_end: span.end as usize,
        start,
        end,
        message: message.to_string(),
    }
}

impl JsonDiagnostic {
    pub fn new(map: &SourceMap, diag: &Diagnostic) -> Self {
        let primary = json_label(map, diag.span, &diag.primary_label);
        JsonDiagnostic {
            code: diag.code.as_str(),
            severity: diag.severity().as_str(),
            message: diag.message.clone(),
            file: primary.file,
            byte_start: primary.byte_start,
            byte_end: primary.byte_end,
            start: primary.start,
            end: primary.end,
            labels: std::iter::once(json_label(map, diag.span, &diag.primary_label))
                .chain(diag.labels.iter().map(|l| json_label(map, l.span, &l.message)))
                .collect(),
            notes: diag.notes.clone(),
            help: diag.help.clone(),
        }
    }
}

/// One JSON object per line, each ending in `\n`.
pub fn render_json(map: &SourceMap, diagnostics: &[Diagnostic]) -> String {
    let mut out = String::new();
    for diag in diagnostics {
        // Serialising plain strings and numbers cannot fail.
        if let Ok(line) = serde_json::to_string(&JsonDiagnostic::new(map, diag)) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
