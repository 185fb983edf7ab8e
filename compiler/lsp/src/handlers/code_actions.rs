//! Quick fixes: a diagnostic that carries a `replacement` for its primary span (a
//! misspelled name's "did you mean `x`?", an unused variable's `_x`) becomes a code action
//! of kind `quickfix` that makes that one edit; one with a `replacement_span` makes it
//! there instead (a missing `loss` inserted before the model's `}`, a `use std::nn::X;` at
//! the top).

use crate::convert::{offset_of, range_of};
use crate::documents::Document;
use crate::stdlib_files::StdlibFiles;
use amp_diagnostics::Code;
use lsp_types::{CodeAction, CodeActionKind, CodeActionOrCommand, Range, TextEdit, WorkspaceEdit};
use std::collections::HashMap;

/// The quick fixes of the document's diagnostics whose primary span meets `range`.
// `WorkspaceEdit::changes` is keyed by `Uri`, whose cached parts clippy counts as
// interior mutability; no key is changed here.
#[allow(clippy::mutable_key_type)]
pub fn code_actions(
    document: &Document,
    stdlib: &StdlibFiles,
    error_pages: Option<&str>,
    range: Range,
) -> Vec<CodeActionOrCommand> {
    let analysis = &document.analysis;
    let Some(file) = analysis.main_file() else {
        return Vec::new();
    };
    let (start, end) = (offset_of(file, range.start), offset_of(file, range.end));
    let (start, end) = (start.min(end), start.max(end));
    analysis
        .checked
        .diagnostics
        .iter()
        .filter(|d| d.span.file == analysis.main && !d.span.is_empty())
        .filter(|d| d.span.start as usize <= end && start <= d.span.end as usize)
        .filter_map(|d| {
            let replacement = d.replacement.as_deref()?;
            let target = d.replacement_span.unwrap_or(d.span);
            // The fix may edit another file of the project (`pub` on an imported item).
            let target_file = analysis.map.get(target.file)?;
            if super::references::is_std(&target_file.name) {
                return None;
            }
            let old = file.slice(d.span);
            let title = match d.code {
                _ if d.replacement_span.is_some() => match d.code {
                    Code::MissingLoss => "Add a `loss` function".to_string(),
                    Code::NonExhaustiveMatch => "Add the missing `match` arms".to_string(),
                    Code::PrivateImport => format!("Make `{old}` public in `{}`", target_file.name),
                    _ => format!("Add `{}`", replacement.trim()),
                },
                Code::UnusedVariable => format!("Rename `{old}` to `{replacement}`"),
                _ => format!("Replace `{old}` with `{replacement}`"),
            };
            let edit = TextEdit { range: range_of(target_file, target), new_text: replacement.to_string() };
            let changes = HashMap::from([(document.uri_of(target.file, stdlib)?, vec![edit])]);
            Some(CodeActionOrCommand::CodeAction(CodeAction {
                title,
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: document.to_lsp_diagnostic(d, stdlib, error_pages).map(|d| vec![d]),
                edit: Some(WorkspaceEdit { changes: Some(changes), ..WorkspaceEdit::default() }),
                is_preferred: Some(true),
                ..CodeAction::default()
            }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsp_types::{Position, Uri};

    fn fixes(text: &str, range: Range) -> Vec<(String, String)> {
        let uri: Uri = "file:///fixes.amp".parse().expect("valid");
        let document = Document::open(uri.clone(), 1, text.to_string(), &amp_sema::NoFiles);
        code_actions(&document, &StdlibFiles::none(), None, range)
            .into_iter()
            .filter_map(|action| match action {
                CodeActionOrCommand::CodeAction(a) => {
                    let edits = a.edit?.changes?.remove(&uri)?;
                    Some((a.title, edits.into_iter().map(|e| e.new_text).collect()))
                }
                CodeActionOrCommand::Command(_) => None,
            })
            .collect()
    }

    #[test]
    fn misspelled_names_and_unused_variables_have_fixes_in_range() {
        let text = "model M(n: int = 4) {\n    param l = Linear(n, n);\n    \
                    fn forward(x: f32[n]) -> f32[n] {\n        let unused = 3;\n        l(xx)\n    }\n    \
                    fn loss(x: f32[n]) -> f32 { sum(forward(x)) }\n}\n";
        let everything = Range::new(Position::new(0, 0), Position::new(99, 0));
        assert_eq!(
            fixes(text, everything),
            [
                ("Rename `unused` to `_unused`".to_string(), "_unused".to_string()),
                ("Replace `xx` with `x`".to_string(), "x".to_string()),
            ]
        );
        let cursor_on_xx = Range::new(Position::new(4, 11), Position::new(4, 11));
        assert_eq!(fixes(text, cursor_on_xx), [("Replace `xx` with `x`".to_string(), "x".to_string())]);
        let elsewhere = Range::new(Position::new(1, 0), Position::new(1, 4));
        assert_eq!(fixes(text, elsewhere), Vec::new());
    }

    #[test]
    fn a_non_exhaustive_match_gets_its_missing_arms() {
        let text = "enum T { A { x: int }, B }\nrecord R { t: T, label: int }\nmodel M {\n    \
                    fn forward(r: R) -> f32[2] {\n        match r.t {\n            B => zeros(),\n        }\n    }\n    \
                    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }\n}\n";
        let on_match = Range::new(Position::new(4, 15), Position::new(4, 15));
        let expected = ("Add the missing `match` arms".to_string(), "\n            A { .. } => zeros(),".to_string());
        assert_eq!(fixes(text, on_match), [expected]);
    }
}
