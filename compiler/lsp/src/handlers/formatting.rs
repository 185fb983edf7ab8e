//! Document formatting: the canonical layout of `amp_fmt`, as the smallest edits that make
//! it: one per run of lines the layout changes (a line diff of the document and its
//! layout), so that an unchanged region keeps the cursor and its undo history. Range
//! formatting returns the edits that touch the range. A document that does not parse gets
//! no edit: its diagnostics already say why, and a broken file is never rewritten.

use crate::convert::position_of;
use crate::documents::Document;
use amp_diagnostics::SourceFile;
use lsp_types as lsp;
use similar::{DiffTag, TextDiff};

/// The edits that format `document`: none when it is already formatted, `None` when it
/// has syntax errors.
pub fn formatting(document: &Document) -> Option<Vec<lsp::TextEdit>> {
    let file = document.analysis.main_file()?;
    let formatted = match amp_fmt::format(document.analysis.main, &document.text) {
        Ok(formatted) => formatted,
        Err(refused) => {
            eprintln!(
                "ampc lsp: not formatting {}: {} syntax error(s)",
                document.uri.as_str(),
                refused.diagnostics.len()
            );
            return None;
        }
    };
    Some(line_edits(file, &formatted))
}

/// The edits of [`formatting`] that touch `range`'s lines: the layout is the whole
/// document's, so a change that crosses the range's edge is taken whole.
pub fn range_formatting(document: &Document, range: lsp::Range) -> Option<Vec<lsp::TextEdit>> {
    let edits = formatting(document)?;
    let touches = |e: &lsp::TextEdit| {
        // An insertion between two lines touches the line it is made at.
        let end = if e.range.end.line > e.range.start.line && e.range.end.character == 0 {
            e.range.end.line - 1
        } else {
            e.range.end.line
        };
        e.range.start.line <= range.end.line && end.max(e.range.start.line) >= range.start.line
    };
    Some(edits.into_iter().filter(touches).collect())
}

/// One edit per run of lines that `file`'s text and `formatted` do not share.
fn line_edits(file: &SourceFile, formatted: &str) -> Vec<lsp::TextEdit> {
    let text = file.text.as_str();
    let diff = TextDiff::from_lines(text, formatted);
    let old: Vec<&str> = diff.old_slices().to_vec();
    let new: Vec<&str> = diff.new_slices().to_vec();
    // The byte offset where old line `i` starts (the text's end for `i` past the last).
    let mut starts = Vec::with_capacity(old.len() + 1);
    let mut at = 0;
    for line in &old {
        starts.push(at);
        at += line.len();
    }
    starts.push(at);
    diff.ops()
        .iter()
        .filter(|op| op.tag() != DiffTag::Equal)
        .map(|op| {
            let (removed, added) = (op.old_range(), op.new_range());
            let range = lsp::Range {
                start: position_of(file, starts[removed.start]),
                end: position_of(file, starts[removed.end]),
            };
            lsp::TextEdit { range, new_text: new[added].concat() }
        })
        .collect()
}
