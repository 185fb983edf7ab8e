//! Document formatting: the canonical layout of `amp_fmt`, as one edit that replaces the
//! whole document (the client diffs it; a file is small). A document that does not parse
//! gets no edit: its diagnostics already say why, and a broken file is never rewritten.

use crate::convert::position_of;
use crate::documents::Document;
use lsp_types as lsp;

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
    if formatted == document.text {
        return Some(Vec::new());
    }
    let whole = lsp::Range { start: lsp::Position::new(0, 0), end: position_of(file, document.text.len()) };
    Some(vec![lsp::TextEdit { range: whole, new_text: formatted }])
}
