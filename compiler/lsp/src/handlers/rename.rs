//! Rename: the declaration and every use in the project of what the name under the cursor
//! names, as one edit of every file it touches ([`references`](super::references) finds
//! them): a layer of a shared module is renamed in its file and in every file that
//! imports it.
//!
//! Refused, with a message for the user rather than an edit that breaks a file: a
//! position that names nothing (a keyword, a built-in, a literal), a name defined in the
//! standard library (its file is read-only), a new name that is not an identifier or is a
//! keyword or type, and a new name that some occurrence, in any file of the project,
//! would collide with: another name in scope there (a local, a member of the component, a
//! top-level definition, an import, a built-in), or, for a field, another field of its
//! record.

use super::completion::{completion, KEYWORDS, TYPES};
use super::references::{is_std, occurrences, project_uses, site_of, span_in, Locator, Occurrences};
use crate::convert::{offset_of, position_of, range_of};
use crate::documents::{Analysis, Document};
use amp_diagnostics::Span;
use amp_sema::SymbolKind;
use lsp_types::{Position, PrepareRenameResponse, TextEdit, Uri, WorkspaceEdit};
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

/// Every occurrence of the name at `position` in the files of `project` (the analyses of
/// the document's project, the document's own among them) replaced by `new_name`, as one
/// edit; `uri_of` names a file's URI.
pub fn rename(
    document: &Document,
    project: &[&Analysis],
    uri_of: &dyn Fn(&str) -> Option<Uri>,
    position: Position,
    new_name: &str,
) -> Result<WorkspaceEdit, String> {
    let analysis = &document.analysis;
    let file = analysis.main_file().ok_or("the document is not analysed")?;
    let found = renamable(analysis, offset_of(file, position))?;
    check_identifier(new_name)?;
    let old_name = analysis.map.get(found.definition.file).map_or("", |f| f.slice(found.definition));
    let definition = site_of(analysis, found.definition).ok_or("the document is not analysed")?;
    let mut sites = project_uses(project, &definition);
    sites.insert(definition.clone());
    if new_name != old_name {
        // Each file is checked by the analysis that has it as its main file.
        for checked in project {
            let Some(main) = checked.main_file() else { continue };
            let here: Vec<Span> = sites
                .iter()
                .filter(|s| s.file == main.name)
                .map(|s| Span { file: checked.main, start: s.start, end: s.end })
                .collect();
            let defined = span_in(checked, &definition).unwrap_or_default();
            if !here.is_empty() {
                check_no_collision(checked, defined, &here, new_name).map_err(|why| {
                    if checked.main == analysis.main {
                        why
                    } else {
                        format!("in `{}`: {why}", main.name)
                    }
                })?;
            }
        }
    }
    // By file name: a URI is no map key (it caches its parts in cells).
    let mut changes: HashMap<&str, (Uri, Vec<TextEdit>)> = HashMap::new();
    let locator = Locator::new(project, uri_of);
    for site in &sites {
        let location =
            locator.location(site).ok_or_else(|| format!("`{}` cannot be edited: it has no file URI", site.file))?;
        let (_, edits) = changes.entry(&site.file).or_insert_with(|| (location.uri, Vec::new()));
        edits.push(TextEdit::new(location.range, new_name.to_string()));
    }
    Ok(WorkspaceEdit { changes: Some(changes.into_values().collect()), ..WorkspaceEdit::default() })
}

/// The occurrences of the name at `offset`, if it is not defined in the standard library.
fn renamable(analysis: &Analysis, offset: usize) -> Result<Occurrences, String> {
    let found = occurrences(analysis, offset)
        .ok_or("nothing to rename here: only names defined in the project can be renamed, not keywords or built-ins")?;
    let defined_in = analysis.map.get(found.definition.file);
    if defined_in.is_none_or(|f| is_std(&f.name)) {
        let name = defined_in.map(|f| f.slice(found.definition)).unwrap_or("this name");
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

    /// A rename with the document as the whole project.
    fn alone(document: &Document, at: Position, new_name: &str) -> Result<WorkspaceEdit, String> {
        let uri_of = |name: &str| crate::documents::uri_of_name(name, &crate::stdlib_files::StdlibFiles::none());
        rename(document, &[&document.analysis], &uri_of, at, new_name)
    }

    fn edit_count(edit: &WorkspaceEdit) -> usize {
        edit.changes.as_ref().map_or(0, |changes| changes.values().map(Vec::len).sum())
    }

    #[test]
    fn a_local_renames_its_binding_and_uses() {
        let doc = open("list_reduce.amp");
        let at = position_at(&doc.analysis, "head(h)", 0, 5);
        let edit = alone(&doc, at, "state").expect("renamable");
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
        assert!(alone(&doc, h, "2x").is_err_and(|e| e.contains("not an identifier")));
        assert!(alone(&doc, h, "for").is_err_and(|e| e.contains("keyword")));
        assert!(alone(&doc, h, "tok").is_err_and(|e| e.contains("in scope")));
        assert!(alone(&doc, h, "relu").is_err_and(|e| e.contains("in scope")));
        let hidden = position_at(&doc.analysis, "hidden: int", 0, 0);
        assert!(alone(&doc, hidden, "vocab").is_err_and(|e| e.contains("in scope")));
        let keyword = position_at(&doc.analysis, "fn forward", 0, 0);
        assert!(alone(&doc, keyword, "f").is_err_and(|e| e.contains("nothing to rename")));
        let builtin = position_at(&doc.analysis, "relu(", 0, 1);
        assert!(prepare_rename(&doc.analysis, builtin).is_err());
        let label = position_at(&doc.analysis, "x.label", 0, 2);
        assert!(alone(&doc, label, "tokens").is_err_and(|e| e.contains("already has a field")));
        let library = open("ggsnn.amp");
        let gru = position_at(&library.analysis, "GruCell(hidden", 0, 1);
        assert!(alone(&library, gru, "Cell").is_err_and(|e| e.contains("standard library")));
    }

    /// examples/shared/encoders.amp's layer, renamed from a model that imports it, changes
    /// the three files: the definition, both imports and both models' uses. A new name
    /// that clashes in another file of the project is refused, naming that file.
    #[test]
    fn a_shared_layer_is_renamed_in_every_file_that_names_it() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let examples = examples.canonicalize().expect("examples/");
        let mut workspace = crate::workspace::Workspace::default();
        workspace.roots = vec![examples.clone()];
        let path = examples.join("sentiment_tree.amp");
        let uri = crate::convert::file_uri(&path).expect("UTF-8");
        workspace.open(uri.clone(), 1, std::fs::read_to_string(&path).expect("the example"));
        let doc = workspace.get(&uri).expect("open");
        assert_eq!(doc.diagnostics(&crate::stdlib_files::StdlibFiles::none(), None), vec![]);
        let at = position_at(&doc.analysis, "WordEncoder(vocab", 0, 1);
        let uri_of = |name: &str| workspace.uri_of_name(name, &crate::stdlib_files::StdlibFiles::none());
        let renamed = |new_name: &str| {
            workspace.with_project(&uri, |project| rename(doc, project, &uri_of, at, new_name)).expect("open")
        };
        let edit = renamed("TokenEncoder").expect("renamable");
        let per_file: HashMap<String, usize> = edit
            .changes
            .iter()
            .flatten()
            .map(|(uri, edits)| (uri.as_str().rsplit('/').next().unwrap_or("").to_string(), edits.len()))
            .collect();
        let expected = [("encoders.amp", 1), ("sentiment_tree.amp", 2), ("sentiment_bag.amp", 2)];
        assert_eq!(per_file, expected.iter().map(|(f, n)| (f.to_string(), *n)).collect());
        let clash = renamed("Sentence").expect_err("a clash");
        assert!(clash.contains("in scope"), "{clash}");
    }
}
