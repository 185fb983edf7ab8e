//! Rename: the declaration and every use in the file of what the name under the cursor
//! names, as one edit of the document ([`references`](super::references) finds them).
//!
//! Refused, with a message for the user rather than an edit that breaks the file: a
//! position that names nothing of the file (a keyword, a built-in, a literal), a name
//! defined in the standard library (its file is read-only), a new name that is not an
//! identifier or is a keyword or type, and a new name that some occurrence would collide
//! with: another name in scope there (a local, a member of the component, a top-level
//! definition, an import, a built-in), or, for a field, another field of its record.

use super::completion::{completion, KEYWORDS, TYPES};
use super::references::{occurrences, Occurrences};
use crate::convert::{offset_of, position_of, range_of};
use crate::documents::{Analysis, Document};
use amp_diagnostics::Span;
use amp_sema::SymbolKind;
use lsp_types::{Position, PrepareRenameResponse, TextEdit, WorkspaceEdit};
use std::collections::HashMap;

/// The name at `position` that a rename would change, with its range; an error saying why
/// not otherwise.
pub fn prepare_rename(analysis: &Analysis, position: Position) -> Result<PrepareRenameResponse, String> {
    let file = analysis.main_file().ok_or("the document is not analysed")?;
    let offset = offset_of(file, position);
    let found = renamable(analysis, offset)?;
    let under_cursor = std::iter::once(found.definition)
        .chain(found.uses.iter().copied())
        .find(|span| span.file == analysis.main && span.contains(offset))
        .unwrap_or(found.definition);
    let range = range_of(file, under_cursor);
    Ok(PrepareRenameResponse::RangeWithPlaceholder { range, placeholder: file.slice(under_cursor).to_string() })
}

/// Every occurrence of the name at `position` replaced by `new_name`, as one edit.
pub fn rename(document: &Document, position: Position, new_name: &str) -> Result<WorkspaceEdit, String> {
    let analysis = &document.analysis;
    let file = analysis.main_file().ok_or("the document is not analysed")?;
    let found = renamable(analysis, offset_of(file, position))?;
    check_identifier(new_name)?;
    let old_name = file.slice(found.definition);
    let mut sites: Vec<Span> = std::iter::once(found.definition).chain(found.uses).collect();
    sites.sort_by_key(|s| (s.start, s.end));
    sites.dedup();
    if new_name != old_name {
        check_no_collision(analysis, found.definition, &sites, new_name)?;
    }
    let edits = sites.into_iter().map(|span| TextEdit::new(range_of(file, span), new_name.to_string())).collect();
    Ok(WorkspaceEdit { changes: Some(HashMap::from([(document.uri.clone(), edits)])), ..WorkspaceEdit::default() })
}

/// The occurrences of the name at `offset`, if it is defined in this file.
fn renamable(analysis: &Analysis, offset: usize) -> Result<Occurrences, String> {
    let found = occurrences(analysis, offset)
        .ok_or("nothing to rename here: only names defined in this file can be renamed, not keywords or built-ins")?;
    if found.definition.file != analysis.main {
        let name = analysis.map.get(found.definition.file).map(|f| f.slice(found.definition)).unwrap_or("this name");
        return Err(format!("`{name}` is defined in the standard library, which cannot be renamed"));
    }
    Ok(found)
}

fn check_identifier(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !starts_well || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') || name == "_" {
        return Err(format!("`{name}` is not an identifier (a letter or `_`, then letters, digits or `_`)"));
    }
    if KEYWORDS.contains(&name) || TYPES.contains(&name) {
        return Err(format!("`{name}` is a keyword or built-in type and cannot name anything"));
    }
    Ok(())
}

/// An error if `new_name` is already a name in scope at one of `sites` (what completion
/// offers there), or, for a field, the name of another field of the same record.
fn check_no_collision(analysis: &Analysis, definition: Span, sites: &[Span], new_name: &str) -> Result<(), String> {
    let Some(file) = analysis.main_file() else {
        return Ok(());
    };
    let symbols = &analysis.program().symbols;
    let field = symbols.iter().find(|s| s.name_span == definition && s.kind == SymbolKind::Field);
    if let Some(field) = field {
        let sibling = symbols.iter().any(|s| {
            s.kind == SymbolKind::Field
                && s.container == field.container
                && s.name == new_name
                && s.name_span != definition
        });
        if sibling {
            let record = field.container.as_deref().unwrap_or("the record");
            return Err(format!("`{record}` already has a field `{new_name}`"));
        }
        return Ok(());
    }
    for site in sites {
        let at = position_of(file, site.start as usize);
        if completion(analysis, at, false).iter().any(|item| item.label == new_name) {
            let line = at.line + 1;
            return Err(format!(
                "`{new_name}` is already a name in scope at line {line}; renaming would change what it refers to"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::position_at;

    use crate::handlers::test_support::example_document as open;

    fn edit_count(edit: &WorkspaceEdit) -> usize {
        edit.changes.as_ref().map_or(0, |changes| changes.values().map(Vec::len).sum())
    }

    #[test]
    fn a_local_renames_its_binding_and_uses() {
        let doc = open("list_reduce.amp");
        let at = position_at(&doc.analysis, "head(h)", 0, 5);
        let edit = rename(&doc, at, "state").expect("renamable");
        assert_eq!(edit_count(&edit), 4);
        let prepared = prepare_rename(&doc.analysis, at).expect("renamable");
        assert!(
            matches!(prepared, PrepareRenameResponse::RangeWithPlaceholder { placeholder, .. } if placeholder == "h")
        );
    }

    #[test]
    fn refusals_are_errors_with_reasons() {
        let doc = open("list_reduce.amp");
        let h = position_at(&doc.analysis, "head(h)", 0, 5);
        assert!(rename(&doc, h, "2x").is_err_and(|e| e.contains("not an identifier")));
        assert!(rename(&doc, h, "for").is_err_and(|e| e.contains("keyword")));
        assert!(rename(&doc, h, "tok").is_err_and(|e| e.contains("in scope")));
        assert!(rename(&doc, h, "relu").is_err_and(|e| e.contains("in scope")));
        let hidden = position_at(&doc.analysis, "hidden: int", 0, 0);
        assert!(rename(&doc, hidden, "vocab").is_err_and(|e| e.contains("in scope")));
        let keyword = position_at(&doc.analysis, "fn forward", 0, 0);
        assert!(rename(&doc, keyword, "f").is_err_and(|e| e.contains("nothing to rename")));
        let builtin = position_at(&doc.analysis, "relu(", 0, 1);
        assert!(prepare_rename(&doc.analysis, builtin).is_err());
        let label = position_at(&doc.analysis, "x.label", 0, 2);
        assert!(rename(&doc, label, "tokens").is_err_and(|e| e.contains("already has a field")));
        let library = open("ggsnn.amp");
        let gru = position_at(&library.analysis, "GruCell(hidden", 0, 1);
        assert!(rename(&library, gru, "Cell").is_err_and(|e| e.contains("standard library")));
    }
}
