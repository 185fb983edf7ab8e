//! Find references: every use in the file of what the name under the cursor names, and,
//! when the client asks for it, the declaration. The target is the name's final
//! definition (through a `use` import), so the uses of a standard-library layer are
//! found and its declaration is a read-only location in the materialised module.

use super::closeness;
use crate::convert::{location_of, offset_of};
use crate::documents::{Analysis, Document};
use crate::stdlib_files::StdlibFiles;
use amp_diagnostics::{FileId, Span};
use lsp_types::{Location, Position};

/// What the name at a position names, and where the file names it.
pub(super) struct Occurrences {
    /// The final definition's name (in the file or in a standard module).
    pub definition: Span,
    /// The uses in the document's file, sorted, without the definition.
    pub uses: Vec<Span>,
}

/// The definition named at `offset` and its uses in the file; `None` off names.
pub(super) fn occurrences(analysis: &Analysis, offset: usize) -> Option<Occurrences> {
    let program = analysis.program();
    // A `use` import refers to the library's definition.
    let chains = super::DefinitionChains::new(program);
    let final_of = |span: Span| chains.final_of(span);
    let in_file = |span: &Span| span.file == analysis.main;
    // On a use, the innermost; else on a definition (a `fn` or `param` name that no
    // reference uses at its own place, or a declaration nothing uses yet).
    let at_use = program
        .references
        .iter()
        .filter(|r| in_file(&r.use_span))
        .filter_map(|r| Some((closeness(r.use_span, offset)?, r.use_span)))
        .min_by_key(|(key, _)| *key)
        .map(|(_, span)| span);
    let at_definition = || {
        let referenced = program.references.iter().map(|r| r.def_span);
        let declared = program.symbols.iter().map(|s| s.name_span);
        referenced
            .chain(declared)
            .filter(in_file)
            .filter_map(|def| Some((closeness(def, offset)?, def)))
            .min_by_key(|(key, _)| *key)
            .map(|(_, def)| def)
    };
    let definition = final_of(at_use.or_else(at_definition)?);
    let mut uses: Vec<Span> = program
        .references
        .iter()
        .filter(|r| in_file(&r.use_span) && r.use_span != definition && final_of(r.def_span) == definition)
        .map(|r| r.use_span)
        .collect();
    uses.sort_by_key(|s| (s.start, s.end));
    uses.dedup();
    Some(Occurrences { definition, uses })
}

pub fn references(
    document: &Document,
    stdlib: &StdlibFiles,
    position: Position,
    include_declaration: bool,
) -> Option<Vec<Location>> {
    let analysis = &document.analysis;
    let found = occurrences(analysis, offset_of(analysis.main_file()?, position))?;
    let uri_of = |file: FileId| document.uri_of(file, stdlib);
    let declaration = include_declaration.then_some(found.definition);
    let mut spans: Vec<Span> = declaration.into_iter().chain(found.uses).collect();
    spans.sort_by_key(|s| (s.file != analysis.main, s.start, s.end));
    Some(spans.into_iter().filter_map(|span| location_of(&analysis.map, span, &uri_of)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::position_at;

    use crate::handlers::test_support::example_document as open;

    fn starts(locations: &[Location]) -> Vec<(u32, u32)> {
        locations.iter().map(|l| (l.range.start.line, l.range.start.character)).collect()
    }

    #[test]
    fn a_hyperparameter_from_its_declaration_with_and_without_it() {
        let doc = open("list_reduce.amp");
        let at = position_at(&doc.analysis, "hidden: int", 0, 1);
        let all = references(&doc, &StdlibFiles::none(), at, true).expect("a name");
        let uses = references(&doc, &StdlibFiles::none(), at, false).expect("a name");
        assert_eq!(all.len(), uses.len() + 1, "{all:?}");
        let declared = position_at(&doc.analysis, "hidden: int", 0, 0);
        assert_eq!(starts(&all)[0], (declared.line, declared.character));
        assert!(uses.len() >= 4, "{uses:?}");
    }

    #[test]
    fn a_stdlib_layer_lists_its_uses_and_its_library_declaration() {
        let temp = tempfile::tempdir().expect("temp dir");
        let stdlib = StdlibFiles::materialise(temp.path()).expect("temp dir is writable");
        let doc = open("ggsnn.amp");
        let at = position_at(&doc.analysis, "GruCell", 1, 1);
        let found = references(&doc, &stdlib, at, true).expect("a name");
        let nn = stdlib.uri_of("<std>/nn.amp").expect("materialised");
        assert_eq!(found.iter().filter(|l| l.uri == nn).count(), 1, "{found:?}");
        assert_eq!(found.iter().filter(|l| l.uri == doc.uri).count(), 2, "{found:?}");
    }
}
