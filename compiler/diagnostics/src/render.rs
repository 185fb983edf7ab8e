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
        if touches_long_line(map, diag) {
            render_compact(map, file, diag, &mut out);
            continue;
        }
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

/// Lines longer than this are not drawn whole under a diagnostic: ariadne draws every
/// labelled line in full, so thousands of diagnostics on one generated 100 KB line printed
/// gigabytes and took the square of the line's length.
const MAX_DRAWN_LINE: usize = 1_000;
/// Bytes of context either side of a span on such a line.
const EXCERPT_CONTEXT: usize = 60;

/// Whether a span of `diag` lies on a line longer than [`MAX_DRAWN_LINE`].
fn touches_long_line(map: &SourceMap, diag: &Diagnostic) -> bool {
    std::iter::once(diag.span).chain(diag.labels.iter().map(|l| l.span)).any(|span| {
        map.get(span.file).is_some_and(|f| {
            let line = f.lines.line_of(f.clamp_offset(span.start as usize));
            let end = if line + 1 < f.lines.line_count() { f.lines.line_start(line + 1) } else { f.text.len() };
            end - f.lines.line_start(line) > MAX_DRAWN_LINE
        })
    })
}

/// A diagnostic on an overlong line: its header, its location and an excerpt of the line
/// around the span, then its notes and help; linear in what it prints.
fn render_compact(map: &SourceMap, file: &crate::SourceFile, diag: &Diagnostic, out: &mut Vec<u8>) {
    let severity = match diag.severity() {
        crate::Severity::Error => "Error",
        crate::Severity::Warning => "Warning",
    };
    let (start, end) = (file.clamp_offset(diag.span.start as usize), file.clamp_offset(diag.span.end as usize));
    let (line, col) = file.line_col(start);
    let from = file.clamp_offset(start.saturating_sub(EXCERPT_CONTEXT)).max(file.lines.line_start(line));
    let line_end = file.text[start..].find('\n').map_or(file.text.len(), |i| start + i);
    let to = file.clamp_offset(end.max(start).saturating_add(EXCERPT_CONTEXT)).min(line_end);
    let mut text = format!("[{}] {severity}: {}\n", diag.code, diag.message);
    text.push_str(&format!("   ╭─[ {}:{}:{} ]\n", file.name, line + 1, col + 1));
    let dots = |cut: bool| if cut { "…" } else { "" };
    let excerpt = &file.text[from.min(to)..to];
    text.push_str(&format!("   │ {}{excerpt}{}\n", dots(from > file.lines.line_start(line)), dots(to < line_end)));
    if !diag.primary_label.is_empty() {
        text.push_str(&format!("   │ {}\n", diag.primary_label));
    }
    for label in &diag.labels {
        if let Some(f) = map.get(label.span.file) {
            let (line, col) = f.line_col(label.span.start as usize);
            text.push_str(&format!("   │ {}: {}:{}:{}\n", label.message, f.name, line + 1, col + 1));
        }
    }
    for note in &diag.notes {
        text.push_str(&format!("   │ Note: {note}\n"));
    }
    if let Some(help) = &diag.help {
        text.push_str(&format!("   │ Help: {help}\n"));
    }
    text.push_str("───╯\n");
    out.extend_from_slice(text.as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Code;

    /// Issue 31: thousands of diagnostics on one generated line printed the whole line for
    /// each. Past `MAX_DRAWN_LINE` a diagnostic shows an excerpt around its span, with
    /// its location and its labels' locations; short lines are drawn as before.
    #[test]
    fn a_diagnostic_on_an_overlong_line_shows_an_excerpt() {
        let mut map = SourceMap::new();
        let long = format!("{}bad{}\nok bad\n", "a ".repeat(2_000), " b".repeat(2_000));
        let id = map.add("m.amp", long.clone());
        let at = long.find("bad").unwrap();
        let diag = Diagnostic::new(Code::UnknownName, Span::new(id, at, at + 3), "unknown name `bad`")
            .with_primary("not in scope")
            .with_label(Span::new(id, long.len() - 4, long.len() - 1), "also here")
            .with_help("did you mean `bat`?");
        let text = render_human(&map, &[diag], false);
        assert!(text.len() < 1_000, "{} bytes", text.len());
        assert!(text.contains("m.amp:1:4001"), "{text}");
        assert!(text.contains("│ …a a ") && text.contains("a a bad b b") && text.contains(" b b…"), "{text}");
        assert!(text.contains("also here: m.amp:2:4"), "{text}");
        assert!(text.contains("Help: did you mean `bat`?"), "{text}");

        let short = Span::new(id, long.len() - 4, long.len() - 1);
        let text = render_human(&map, &[Diagnostic::new(Code::UnknownName, short, "unknown name `bad`")], false);
        assert!(text.contains("ok bad") && !text.contains('…'), "{text}");
    }
}
