//! Answers to the requests, each read from a document's cached [`Analysis`]: hover,
//! go-to-definition, document symbols, completion, inlay hints, quick fixes, document
//! highlight, references, rename, semantic tokens and signature help; formatting, from
//! the document's text, and folding ranges, from its tokens.
//! Nothing here re-checks or does IO.

mod assists;
mod code_actions;
mod completion;
mod declaration;
mod definition;
mod folding;
mod formatting;
mod highlight;
mod hover;
mod inlay_hints;
mod references;
mod rename;
mod semantic_tokens;
mod signature_help;
mod symbols;

pub use assists::assists;
pub use code_actions::code_actions;
pub use completion::completion;
pub use definition::definition;
pub use folding::folding_ranges;
pub use formatting::{formatting, range_formatting};
pub use highlight::document_highlight;
pub use hover::hover;
pub use inlay_hints::inlay_hints;
pub use references::references;
pub use rename::{prepare_rename, rename};
pub use semantic_tokens::{legend as semantic_tokens_legend, semantic_tokens};
pub use signature_help::signature_help;
pub use symbols::{document_symbols, workspace_symbols};

use crate::documents::Analysis;
use amp_diagnostics::Span;
use amp_sema::{Program, Reference};
use std::collections::HashMap;

/// How tightly `span` holds `offset`, smaller is better: spans that contain it strictly
/// before spans that merely end at it (a cursor just after a name still hovers it), then
/// the shortest (the innermost).
fn closeness(span: Span, offset: usize) -> Option<(bool, usize)> {
    span.contains(offset).then(|| (offset == span.end as usize && !span.is_empty(), span.len()))
}

/// The innermost reference of the document's own file at `offset`.
fn reference_at(analysis: &Analysis, offset: usize) -> Option<&Reference> {
    analysis
        .program()
        .references
        .iter()
        .filter(|r| r.use_span.file == analysis.main)
        .filter_map(|r| Some((closeness(r.use_span, offset)?, r)))
        .min_by_key(|(key, _)| *key)
        .map(|(_, r)| r)
}

/// The innermost typed expression of the document's own file at `offset`.
fn expr_type_at(analysis: &Analysis, offset: usize) -> Option<(Span, &str)> {
    analysis
        .program()
        .expr_types
        .iter()
        .filter(|(span, _)| span.file == analysis.main)
        .filter_map(|(span, ty)| Some((closeness(*span, offset)?, *span, ty.as_str())))
        .min_by_key(|(key, _, _)| *key)
        .map(|(_, span, ty)| (span, ty))
}

/// Where `reference` is finally defined: a name imported with `use std::nn::GruCell`
/// refers to the `use`, which refers in turn to the layer in the standard library.
/// Follows such chains a few steps (they are one step long today) and never loops.
fn final_definition(program: &Program, reference: &Reference) -> Span {
    follow_definitions(reference.def_span, |definition| {
        program.references.iter().find(|r| r.use_span == definition && r.def_span != definition).map(|r| r.def_span)
    })
}

/// Follows `next` from `span` a few steps (chains are one step long today), never looping.
fn follow_definitions(mut span: Span, next: impl Fn(Span) -> Option<Span>) -> Span {
    for _ in 0..8 {
        match next(span) {
            Some(definition) => span = definition,
            None => break,
        }
    }
    span
}

/// Each use's definition in one table, for handlers that follow many chains at once
/// (references, semantic tokens); [`final_definition`] scans for a single one.
pub(super) struct DefinitionChains(HashMap<Span, Span>);

impl DefinitionChains {
    pub(super) fn new(program: &Program) -> Self {
        DefinitionChains(
            program.references.iter().filter(|r| r.use_span != r.def_span).map(|r| (r.use_span, r.def_span)).collect(),
        )
    }

    /// Where `span` is finally defined, as [`final_definition`] finds it.
    pub(super) fn final_of(&self, span: Span) -> Span {
        follow_definitions(span, |s| self.0.get(&s).copied())
    }
}

/// The doc comment of the record, enum, component, function or parameter whose name is
/// at `definition`.
fn doc_at(program: &Program, definition: Span) -> Option<&str> {
    let records = program.records.iter().map(|r| (r.span, &r.doc));
    let enums = program.enums.iter().map(|e| (e.span, &e.doc));
    let components = program.components.iter().flat_map(|c| {
        let fns = c.fns.iter().map(|f| (f.span, &f.doc));
        let params = c.params.iter().map(|p| (p.span, &p.doc));
        std::iter::once((c.span, &c.doc)).chain(fns).chain(params)
    });
    records
        .chain(enums)
        .chain(components)
        .find(|(span, _)| *span == definition)
        .and_then(|(_, doc)| doc.as_deref())
        .filter(|doc| !doc.trim().is_empty())
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::convert::position_of;
    use crate::documents::Analysis;
    use lsp_types::Position;

    /// The LSP position of the `nth` (0-based) occurrence of `needle` in the analysed
    /// text, plus `delta` bytes.
    pub fn position_at(analysis: &Analysis, needle: &str, nth: usize, delta: usize) -> Position {
        let file = analysis.main_file().expect("the main file");
        let offset = file.text.match_indices(needle).nth(nth).map(|(i, _)| i).expect("the needle occurs often enough");
        position_of(file, offset + delta)
    }

    /// `examples/NAME` opened as the editor's document.
    pub fn example_document(name: &str) -> crate::documents::Document {
        let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).expect("the example exists");
        let uri = format!("file:///examples/{name}").parse().expect("valid");
        crate::documents::Document::open(uri, 0, text, &amp_sema::NoFiles)
    }

    pub fn example(name: &str) -> Analysis {
        let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("the example exists");
        Analysis::of(&path, &text, &amp_sema::NoFiles)
    }
}
