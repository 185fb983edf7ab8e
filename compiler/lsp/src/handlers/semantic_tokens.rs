//! Semantic tokens for the whole document: every name the checker resolved, coloured by
//! what it names, so a hyperparameter, a `param`, a function parameter and a local look
//! different even where the grammar cannot tell them apart.
//!
//! The kinds come from the checker's tables: each definition (records, fields, enums,
//! variants, components, hyperparameters, `param`s, functions, the file's symbols) is
//! classified by its span, in the file or in a standard module; a local is a function
//! parameter when it is bound in the signature (before the body's `{`), else a variable.
//! Every reference of the file then takes the kind of its final definition (through a
//! `use` import). Keywords, literals and built-ins are left to the editor's grammar.

use crate::documents::Analysis;
use amp_diagnostics::Span;
use amp_sema::{Program, SymbolKind};
use lsp_types::{SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokens, SemanticTokensLegend};
use std::collections::HashMap;

/// The token types, in legend order. `param` is Amp's own: a learnable member of a model
/// or layer, which no standard type describes (Neovim highlights it as `@lsp.type.param`).
const TYPES: [&str; 10] = [
    "parameter",
    "typeParameter",
    "variable",
    "property",
    "struct",
    "class",
    "function",
    "enum",
    "enumMember",
    "param",
];
const PARAMETER: u32 = 0;
const HYPERPARAMETER: u32 = 1;
const VARIABLE: u32 = 2;
const FIELD: u32 = 3;
const RECORD: u32 = 4;
const COMPONENT: u32 = 5;
const FUNCTION: u32 = 6;
const ENUM: u32 = 7;
const VARIANT: u32 = 8;
const PARAM: u32 = 9;

/// Modifier bits, in legend order.
const MODIFIERS: [&str; 3] = ["declaration", "readonly", "defaultLibrary"];
const DECLARATION: u32 = 1;
const READONLY: u32 = 2;
const DEFAULT_LIBRARY: u32 = 4;

pub fn legend() -> SemanticTokensLegend {
    SemanticTokensLegend {
        token_types: TYPES.iter().map(|t| SemanticTokenType::new(t)).collect(),
        token_modifiers: MODIFIERS.iter().map(|m| SemanticTokenModifier::new(m)).collect(),
    }
}

pub fn semantic_tokens(analysis: &Analysis) -> SemanticTokens {
    let Some(file) = analysis.main_file() else {
        return SemanticTokens::default();
    };
    let program = analysis.program();
    let mut kinds = definition_kinds(program);
    for (span, kind) in local_kinds(analysis) {
        kinds.entry(span).or_insert(kind);
    }
    let chains = super::DefinitionChains::new(program);
    let final_of = |span: Span| chains.final_of(span);
    let modifiers_of = |definition: Span, kind: (u32, u32)| {
        let library = if definition.file == analysis.main { 0 } else { DEFAULT_LIBRARY };
        kind.1 | library
    };
    let mut tokens: Vec<(Span, u32, u32)> = Vec::new();
    for (span, kind) in &kinds {
        if span.file == analysis.main {
            tokens.push((*span, kind.0, kind.1 | DECLARATION));
        }
    }
    for r in program.references.iter().filter(|r| r.use_span.file == analysis.main && r.use_span != r.def_span) {
        let definition = final_of(r.def_span);
        if let Some(kind) = kinds.get(&definition) {
            tokens.push((r.use_span, kind.0, modifiers_of(definition, *kind)));
        }
    }
    tokens.sort_by_key(|(span, _, modifiers)| (span.start, std::cmp::Reverse(*modifiers & DECLARATION), span.end));
    tokens.dedup_by_key(|(span, _, _)| span.start);

    let mut data = Vec::with_capacity(tokens.len());
    let (mut line, mut column) = (0u32, 0u32);
    for (span, token_type, modifiers) in tokens {
        if span.is_empty() {
            continue;
        }
        let (l, c) = file.line_col_utf16(span.start as usize);
        let (l, c) = (to_u32(l), to_u32(c));
        let length = to_u32(file.slice(span).encode_utf16().count());
        let delta_start = if l == line { c - column } else { c };
        data.push(SemanticToken {
            delta_line: l - line,
            delta_start,
            length,
            token_type,
            token_modifiers_bitset: modifiers,
        });
        (line, column) = (l, c);
    }
    SemanticTokens { result_id: None, data }
}

/// The kind (type, modifiers) of every named definition the checker knows, by its span.
fn definition_kinds(program: &Program) -> HashMap<Span, (u32, u32)> {
    let mut kinds = HashMap::new();
    for record in &program.records {
        kinds.insert(record.span, (RECORD, 0));
        for field in &record.fields {
            kinds.insert(field.span, (FIELD, 0));
        }
    }
    for e in &program.enums {
        kinds.insert(e.span, (ENUM, 0));
        for variant in &e.variants {
            kinds.insert(variant.span, (VARIANT, 0));
            for field in &variant.fields {
                kinds.insert(field.span, (FIELD, 0));
            }
        }
    }
    for component in &program.components {
        kinds.insert(component.span, (COMPONENT, 0));
        kinds.extend(component.hyperparams.iter().map(|h| (h.span, (HYPERPARAMETER, READONLY))));
        kinds.extend(component.params.iter().map(|p| (p.span, (PARAM, 0))));
        kinds.extend(component.fns.iter().map(|f| (f.span, (FUNCTION, 0))));
    }
    for symbol in &program.symbols {
        let kind = match symbol.kind {
            SymbolKind::Record => (RECORD, 0),
            SymbolKind::Enum => (ENUM, 0),
            SymbolKind::Variant => (VARIANT, 0),
            SymbolKind::Field => (FIELD, 0),
            SymbolKind::Layer | SymbolKind::Model | SymbolKind::Network => (COMPONENT, 0),
            SymbolKind::Function => (FUNCTION, 0),
            SymbolKind::Param => (PARAM, 0),
            SymbolKind::HyperParam => (HYPERPARAMETER, READONLY),
            SymbolKind::Const => (VARIABLE, READONLY),
        };
        kinds.entry(symbol.name_span).or_insert(kind);
    }
    kinds
}

/// The locals of the file: a function's parameters (bound before its body's `{`) and the
/// other bindings.
fn local_kinds(analysis: &Analysis) -> Vec<(Span, (u32, u32))> {
    let Some(file) = analysis.main_file() else {
        return Vec::new();
    };
    let program = analysis.program();
    // Where each function's body starts: the first `{` after its name.
    let bodies: Vec<(Span, usize)> = program
        .symbols
        .iter()
        .filter(|s| s.kind == SymbolKind::Function && s.span.file == analysis.main)
        .filter_map(|s| {
            let after = file.text.get(s.name_span.end as usize..s.span.end as usize)?;
            Some((s.span, s.name_span.end as usize + after.find('{')?))
        })
        .collect();
    program
        .local_scopes
        .iter()
        .filter(|l| l.def_span.file == analysis.main)
        .map(|l| {
            let start = l.def_span.start as usize;
            let in_signature = bodies.iter().any(|(function, body)| function.contains(start) && start < *body);
            (l.def_span, (if in_signature { PARAMETER } else { VARIABLE }, 0))
        })
        .collect()
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::{example, position_at};

    /// The (line, column, type name) of each token, decoded.
    fn decoded(analysis: &Analysis) -> Vec<(u32, u32, &'static str)> {
        let (mut line, mut column) = (0, 0);
        let mut out = Vec::new();
        for token in semantic_tokens(analysis).data {
            if token.delta_line > 0 {
                column = 0;
            }
            line += token.delta_line;
            column += token.delta_start;
            out.push((line, column, TYPES[token.token_type as usize]));
        }
        out
    }

    #[test]
    fn each_kind_of_name_gets_its_type() {
        let analysis = example("list_reduce.amp");
        let tokens = decoded(&analysis);
        let type_at = |needle: &str, delta: usize| {
            let p = position_at(&analysis, needle, 0, delta);
            tokens.iter().find(|(l, c, _)| (*l, *c) == (p.line, p.character)).map(|(_, _, t)| *t)
        };
        assert_eq!(type_at("Example {", 0), Some("struct"));
        assert_eq!(type_at("label: int", 0), Some("property"));
        assert_eq!(type_at("x.label", 2), Some("property"));
        assert_eq!(type_at("ListReduce", 0), Some("class"));
        assert_eq!(type_at("hidden: int", 0), Some("typeParameter"));
        assert_eq!(type_at("2 * hidden", 4), Some("typeParameter"));
        assert_eq!(type_at("cell = Linear", 0), Some("param"));
        assert_eq!(type_at("cell(concat", 0), Some("param"));
        assert_eq!(type_at("x: Example", 0), Some("parameter"));
        assert_eq!(type_at("x.tokens", 0), Some("parameter"));
        assert_eq!(type_at("var h", 4), Some("variable"));
        assert_eq!(type_at("head(h)", 5), Some("variable"));
        assert_eq!(type_at("tok in", 0), Some("variable"));
        assert_eq!(type_at("forward(x:", 0), Some("function"));
        assert_eq!(type_at("forward(x),", 0), Some("function"));
    }
}
