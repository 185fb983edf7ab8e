//! Find references: every use in the project of what the name under the cursor names,
//! and, when the client asks for it, the declaration. The target is the name's final
//! definition (through `use` imports), so the uses of a layer imported from another file
//! are found in every file that imports it, and the uses of a standard-library layer
//! have a read-only declaration in the materialised module.

use super::closeness;
use crate::convert::{offset_of, range_of};
use crate::documents::{Analysis, Document};
use amp_diagnostics::{FileId, SourceFile, Span};
use lsp_types::{Location, Position, Uri};
use std::collections::{BTreeSet, HashMap};

/// A place in a file, as every analysis can name it: each has its own file numbers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Site {
    pub file: String,
    pub start: u32,
    pub end: u32,
}

pub(super) fn site_of(analysis: &Analysis, span: Span) -> Option<Site> {
    let file = analysis.map.get(span.file)?.name.clone();
    Some(Site { file, start: span.start, end: span.end })
}

/// The span of `site` in `analysis`, when the analysis reads its file.
pub(super) fn span_in(analysis: &Analysis, site: &Site) -> Option<Span> {
    Some(Span { file: analysis.map.find(&site.file)?, start: site.start, end: site.end })
}

/// Whether the file an analysis calls `name` is a standard module (read-only).
pub(super) fn is_std(name: &str) -> bool {
    name.starts_with("<std>")
}

/// Every use of `definition` in the files of the project's analyses, standard modules
/// aside: a file read by several analyses (a shared module) counts once.
pub(super) fn project_uses(project: &[&Analysis], definition: &Site) -> BTreeSet<Site> {
    let mut uses = BTreeSet::new();
    for analysis in project {
        let chains = super::DefinitionChains::new(analysis.program());
        for reference in &analysis.program().references {
            let target = chains.final_of(reference.def_span);
            if reference.use_span == target || site_of(analysis, target).as_ref() != Some(definition) {
                continue;
            }
            uses.extend(site_of(analysis, reference.use_span).filter(|s| !is_std(&s.file)));
        }
    }
    uses
}

/// Where the sites of a project's files are: each file's text (from the first analysis
/// that reads it) and URI, found by name once rather than by a scan per site.
pub(super) struct Locator<'p> {
    files: HashMap<&'p str, (&'p SourceFile, Option<Uri>)>,
}

impl<'p> Locator<'p> {
    pub fn new(project: &[&'p Analysis], uri_of: &dyn Fn(&str) -> Option<Uri>) -> Locator<'p> {
        let mut files = HashMap::new();
        for analysis in project {
            for (_, file) in analysis.map.files() {
                files.entry(file.name.as_str()).or_insert_with(|| (file, uri_of(&file.name)));
            }
        }
        Locator { files }
    }

    pub fn location(&self, site: &Site) -> Option<Location> {
        let (file, uri) = self.files.get(site.file.as_str())?;
        let span = Span { file: FileId(0), start: site.start, end: site.end };
        Some(Location::new(uri.clone()?, range_of(file, span)))
    }
}

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

/// The references of the name at `position` in `document`, across `project` (the
/// analyses of its project's files, the document's own among them); `uri_of` names a
/// file's URI.
pub fn references(
    document: &Document,
    project: &[&Analysis],
    uri_of: &dyn Fn(&str) -> Option<Uri>,
    position: Position,
    include_declaration: bool,
) -> Option<Vec<Location>> {
    let analysis = &document.analysis;
    let found = occurrences(analysis, offset_of(analysis.main_file()?, position))?;
    let definition = site_of(analysis, found.definition)?;
    let uses = project_uses(project, &definition);
    // The declaration, then the document's own uses, then the other files'.
    let own = &analysis.main_file()?.name;
    let mut uses: Vec<Site> = uses.into_iter().collect();
    uses.sort_by(|a, b| (a.file != *own, &a.file, a.start).cmp(&(b.file != *own, &b.file, b.start)));
    let declaration = include_declaration.then_some(definition);
    let sites = declaration.into_iter().chain(uses);
    let locator = Locator::new(project, uri_of);
    Some(sites.filter_map(|site| locator.location(&site)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::position_at;

    use crate::handlers::test_support::example_document as open;

    use crate::stdlib_files::StdlibFiles;

    fn no_std(name: &str) -> Option<Uri> {
        crate::documents::uri_of_name(name, &StdlibFiles::none())
    }

    fn starts(locations: &[Location]) -> Vec<(u32, u32)> {
        locations.iter().map(|l| (l.range.start.line, l.range.start.character)).collect()
    }

    #[test]
    fn a_hyperparameter_from_its_declaration_with_and_without_it() {
        let doc = open("list_reduce.amp");
        let at = position_at(&doc.analysis, "hidden: int", 0, 1);
        let all = references(&doc, &[&doc.analysis], &no_std, at, true).expect("a name");
        let uses = references(&doc, &[&doc.analysis], &no_std, at, false).expect("a name");
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
        let uri_of = |name: &str| crate::documents::uri_of_name(name, &stdlib);
        let found = references(&doc, &[&doc.analysis], &uri_of, at, true).expect("a name");
        let nn = stdlib.uri_of("<std>/nn.amp").expect("materialised");
        assert_eq!(found.iter().filter(|l| l.uri == nn).count(), 1, "{found:?}");
        assert_eq!(found.iter().filter(|l| l.uri == doc.uri).count(), 2, "{found:?}");
    }
}
