//! Document symbols: the file's records, enums, layers, models, networks and constants,
//! with their fields, variants, hyperparameters, `param`s and functions as children.
//!
//! Nesting follows the spans (a symbol is a child of the innermost symbol whose span
//! contains its own), so it holds whatever the checker lists, on half-typed code too.

use crate::convert::range_of;
use crate::documents::Analysis;
use amp_diagnostics::Span;
use amp_sema::{SymbolInfo, SymbolKind};
use lsp_types as lsp;
use std::collections::HashMap;

pub fn document_symbols(analysis: &Analysis) -> Vec<lsp::DocumentSymbol> {
    let Some(file) = analysis.main_file() else {
        return Vec::new();
    };
    let program = analysis.program();
    // What the checker says about a definition wherever it is used: the symbol's detail.
    let mut details: HashMap<Span, &str> = HashMap::new();
    for reference in &program.references {
        details.entry(reference.def_span).or_insert(&reference.hover);
    }
    let mut symbols: Vec<&SymbolInfo> = program.symbols.iter().filter(|s| s.span.file == analysis.main).collect();
    symbols.sort_by_key(|s| (s.span.start, std::cmp::Reverse(s.span.end)));

    let mut roots = Vec::new();
    // The chain of open symbols, outermost first, each with its span.
    let mut open: Vec<(Span, lsp::DocumentSymbol)> = Vec::new();
    for symbol in symbols {
        // The name lies inside the symbol's span; `to` only guards LSP's rule that the
        // selection range is inside the range.
        let span = symbol.span.to(symbol.name_span);
        close_until_inside(&mut open, &mut roots, Some(span));
        let in_container = !open.is_empty();
        #[allow(deprecated)] // `deprecated` is a required field of the struct.
        let converted = lsp::DocumentSymbol {
            name: symbol.name.clone(),
            detail: details.get(&symbol.name_span).map(|d| d.to_string()),
            kind: kind_of(symbol.kind, in_container),
            tags: None,
            deprecated: None,
            range: range_of(file, span),
            selection_range: range_of(file, symbol.name_span),
            children: None,
        };
        open.push((span, converted));
    }
    close_until_inside(&mut open, &mut roots, None);
    roots
}

/// Workspace symbols: every declaration of the files of `analyses` whose name holds the
/// characters of `query` in order, ignoring case (`wenc` finds `WordEncoder`), sorted by
/// name then file. Each file's declarations come from the analysis that has it as its
/// main file, so a module imported by many is listed once.
#[allow(deprecated)] // `deprecated` is a required field of the struct.
pub fn workspace_symbols(
    analyses: &[&Analysis],
    uri_of: &dyn Fn(&str) -> Option<lsp::Uri>,
    query: &str,
) -> Vec<lsp::SymbolInformation> {
    let query = query.to_lowercase();
    let matches = |name: &str| {
        let mut wanted = query.chars().peekable();
        for c in name.chars().flat_map(char::to_lowercase) {
            if wanted.peek() == Some(&c) {
                wanted.next();
            }
        }
        wanted.peek().is_none()
    };
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    for analysis in analyses {
        let Some(file) = analysis.main_file().filter(|f| seen.insert(f.name.clone())) else {
            continue;
        };
        let Some(uri) = uri_of(&file.name) else { continue };
        let symbols = analysis.program().symbols.iter().filter(|s| s.span.file == analysis.main && matches(&s.name));
        found.extend(symbols.map(|symbol| lsp::SymbolInformation {
            name: symbol.name.clone(),
            kind: kind_of(symbol.kind, symbol.container.is_some()),
            tags: None,
            deprecated: None,
            location: lsp::Location::new(uri.clone(), range_of(file, symbol.name_span)),
            container_name: symbol.container.clone(),
        }));
    }
    found.sort_by(|a, b| (&a.name, a.location.uri.as_str()).cmp(&(&b.name, b.location.uri.as_str())));
    found
}

/// Pops the open symbols that do not contain `span` (all of them when `span` is `None`),
/// attaching each to its parent, or to the roots when it has none.
fn close_until_inside(
    open: &mut Vec<(Span, lsp::DocumentSymbol)>,
    roots: &mut Vec<lsp::DocumentSymbol>,
    span: Option<Span>,
) {
    while let Some((parent, _)) = open.last() {
        if span.is_some_and(|s| parent.start <= s.start && s.end <= parent.end) {
            return;
        }
        let Some((_, finished)) = open.pop() else {
            return;
        };
        match open.last_mut() {
            Some((_, parent)) => parent.children.get_or_insert_with(Vec::new).push(finished),
            None => roots.push(finished),
        }
    }
}

fn kind_of(kind: SymbolKind, in_container: bool) -> lsp::SymbolKind {
    match kind {
        SymbolKind::Record => lsp::SymbolKind::STRUCT,
        SymbolKind::Enum => lsp::SymbolKind::ENUM,
        SymbolKind::Variant => lsp::SymbolKind::ENUM_MEMBER,
        SymbolKind::Field => lsp::SymbolKind::FIELD,
        SymbolKind::Layer => lsp::SymbolKind::CLASS,
        SymbolKind::Model => lsp::SymbolKind::MODULE,
        SymbolKind::Network => lsp::SymbolKind::NAMESPACE,
        SymbolKind::Function if in_container => lsp::SymbolKind::METHOD,
        SymbolKind::Function => lsp::SymbolKind::FUNCTION,
        SymbolKind::Param => lsp::SymbolKind::PROPERTY,
        SymbolKind::HyperParam => lsp::SymbolKind::TYPE_PARAMETER,
        SymbolKind::Const => lsp::SymbolKind::CONSTANT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::example;

    fn names(symbols: &[lsp::DocumentSymbol]) -> Vec<&str> {
        symbols.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn a_model_lists_its_hyperparameters_params_and_functions() {
        let analysis = example("list_reduce.amp");
        let symbols = document_symbols(&analysis);
        assert_eq!(names(&symbols), ["Example", "ListReduce"]);
        let record = &symbols[0];
        assert_eq!(record.kind, lsp::SymbolKind::STRUCT);
        assert_eq!(names(record.children.as_deref().unwrap_or_default()), ["tokens", "label"]);
        let model = &symbols[1];
        assert_eq!(model.kind, lsp::SymbolKind::MODULE);
        let children = model.children.as_deref().unwrap_or_default();
        assert_eq!(names(children), ["vocab", "hidden", "classes", "embed", "cell", "head", "forward", "loss"]);
        let forward = &children[6];
        assert_eq!(forward.kind, lsp::SymbolKind::METHOD);
        assert!(forward.detail.as_deref().is_some_and(|d| d.starts_with("fn forward(")));
        assert_eq!(children[4].detail.as_deref(), Some("param cell: Linear(2 * hidden, hidden)"));
        for child in children {
            let inside = |r: lsp::Range| model.range.start <= r.start && r.end <= model.range.end;
            assert!(inside(child.range) && inside(child.selection_range));
        }
    }

    #[test]
    fn enums_list_their_variants() {
        let analysis = example("tree_lstm.amp");
        let symbols = document_symbols(&analysis);
        assert_eq!(names(&symbols), ["Tree", "Sentence", "TreeLstm"]);
        let variants = symbols[0].children.as_deref().unwrap_or_default();
        assert_eq!(names(variants), ["Leaf", "Node"]);
        assert!(variants.iter().all(|v| v.kind == lsp::SymbolKind::ENUM_MEMBER));
    }

    #[test]
    fn half_typed_code_still_lists_what_parsed() {
        let analysis =
            Analysis::of("half.amp", "record A { x: int }\nmodel M(n: int = 2) {\n    fn forward(", &amp_sema::NoFiles);
        let symbols = document_symbols(&analysis);
        assert!(names(&symbols).contains(&"A"), "{:?}", names(&symbols));
    }
}
