//! Completion of the names in scope at the cursor, or of members after a `.`.
//!
//! In scope: the locals bound before the cursor whose scope (block, closure, arm or loop,
//! from the checker's `local_scopes`) holds the cursor, the enclosing component's hyperparameters, `param`s and
//! functions, the file's top-level definitions, enum variants and imports, the built-in
//! functions, the parameterized primitives, the scalar types and the keywords. After a
//! `.`: the fields of a record, `map` on a sequence, the functions of a layer instance;
//! the receiver's type comes from the typed tree, or, when the line does not parse yet,
//! from the chain of names before the dot (`x.tokens.`) resolved at the cursor.
//! Each table is walked once per request (no scan per symbol), so a 50k-line file
//! completes as fast as its tables can be read.
//! The client filters by what has been typed; this only ranks (locals first).

use crate::convert::offset_of;
use crate::documents::Analysis;
use amp_diagnostics::Span;
use amp_sema::Reference;
use amp_sema::{Builtin, SymbolInfo, SymbolKind};
use lsp_types::{CompletionItem, CompletionItemKind, Position};
use std::collections::{HashMap, HashSet};

pub(super) const KEYWORDS: &[&str] = &[
    "use", "pub", "const", "record", "enum", "layer", "model", "network", "param", "fn", "let", "var", "if", "else",
    "for", "in", "while", "match", "true", "false",
];
pub(super) const TYPES: &[&str] = &["int", "bool", "f32"];
/// Parameterized primitives: `param l = Linear(4, 8)`.
const PRIMITIVES: &[&str] = &["Linear", "Embedding", "LayerNorm"];

/// Ranks of the groups, as `sort_text` prefixes: nearer names first.
const RANK_LOCAL: char = '0';
const RANK_MEMBER: char = '1';
const RANK_FILE: char = '2';
const RANK_BUILTIN: char = '3';
const RANK_KEYWORD: char = '4';

pub fn completion(analysis: &Analysis, position: Position, snippets: bool) -> Vec<CompletionItem> {
    let Some(file) = analysis.main_file() else {
        return Vec::new();
    };
    let offset = offset_of(file, position);
    let before = &file.text[..offset];
    let word_start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
        .last()
        .map_or(offset, |(i, _)| i);
    let mut items = Items::default();
    if before[..word_start].ends_with('.') {
        members(analysis, word_start - 1, &mut items);
    } else {
        in_scope(analysis, offset, word_start, &mut items);
        if snippets {
            items.snippets();
        }
    }
    items.list
}

/// Templates for the constructs a model is written with, as LSP snippets (`$1` the
/// first place the cursor goes, `${1:name}` with a default, `$0` the last).
const SNIPPETS: &[(&str, &str, &str)] = &[
    (
        "model",
        "a model with its parameters, forward and loss",
        "model ${1:Name}(${2:hidden}: int = ${3:64}) {\n    param ${4:layer} = Linear(${5:4}, ${2:hidden});\n\n    fn forward(x: ${6:Input}) -> f32[${2:hidden}] {\n        $0\n    }\n\n    fn loss(x: ${6:Input}) -> f32 {\n        cross_entropy(forward(x), x.label)\n    }\n}",
    ),
    ("layer", "a layer with its apply", "layer ${1:Name}(${2:n}: int) {\n    fn apply(x: f32[${2:n}]) -> f32[${2:n}] {\n        $0\n    }\n}"),
    ("record", "a record (an input's type)", "record ${1:Input} {\n    ${2:x}: ${3:f32[4]},\n    label: int,\n}"),
    ("enum", "an enum (a tree's type)", "enum ${1:Tree} {\n    ${2:Leaf} { ${3:word}: int },\n    ${4:Node} { left: ${1:Tree}, right: ${1:Tree} },\n}"),
    ("fn", "a function", "fn ${1:name}(${2:x}: ${3:f32[4]}) -> ${4:f32[4]} {\n    $0\n}"),
    ("match", "a match with an arm per variant", "match ${1:t} {\n    ${2:Leaf} { $3 } => $4,\n    ${5:Node} { $6 } => $0,\n}"),
    ("for", "a loop over a sequence", "for ${1:tok} in ${2:x.tokens} {\n    $0\n}"),
    ("while", "a loop while a condition holds", "while ${1:condition} {\n    $0\n}"),
    ("if", "if and else", "if ${1:condition} { $2 } else { $0 }"),
];

impl Items {
    /// [`SNIPPETS`], after the plain keywords of the same names (so that both show).
    fn snippets(&mut self) {
        for (keyword, detail, body) in SNIPPETS {
            self.list.push(CompletionItem {
                label: format!("{keyword}…"),
                kind: Some(CompletionItemKind::SNIPPET),
                detail: Some(detail.to_string()),
                filter_text: Some(keyword.to_string()),
                insert_text: Some(body.to_string()),
                insert_text_format: Some(lsp_types::InsertTextFormat::SNIPPET),
                sort_text: Some(format!("{RANK_KEYWORD}{keyword}~")),
                ..CompletionItem::default()
            });
        }
    }
}

/// Items without duplicate labels: the first (best ranked) of a name wins.
#[derive(Default)]
struct Items {
    list: Vec<CompletionItem>,
    seen: HashSet<String>,
}

impl Items {
    fn add(&mut self, label: &str, kind: CompletionItemKind, detail: Option<&str>, rank: char) {
        if label.is_empty() || !self.seen.insert(label.to_string()) {
            return;
        }
        self.list.push(CompletionItem {
            label: label.to_string(),
            kind: Some(kind),
            detail: detail.map(str::to_string),
            sort_text: Some(format!("{rank}{label}")),
            ..CompletionItem::default()
        });
    }
}

fn in_scope(analysis: &Analysis, offset: usize, word_start: usize, items: &mut Items) {
    let Some(file) = analysis.main_file() else {
        return;
    };
    let program = analysis.program();
    let symbols: Vec<&SymbolInfo> = program.symbols.iter().filter(|s| s.span.file == analysis.main).collect();
    let innermost = |kinds: &[SymbolKind]| {
        symbols
            .iter()
            .filter(|s| kinds.contains(&s.kind) && s.span.contains(offset))
            .min_by_key(|s| s.span.len())
            .copied()
    };

    // Locals bound before the word whose scope holds it, latest binding first so it
    // shadows earlier ones of the same name.
    if let Some(function) = innermost(&[SymbolKind::Function]) {
        for binding in locals_at(analysis, function.span, word_start) {
            let name = file.slice(binding.def_span);
            items.add(name, CompletionItemKind::VARIABLE, Some(&binding.hover), RANK_LOCAL);
        }
    }

    let component = innermost(&[SymbolKind::Model, SymbolKind::Layer, SymbolKind::Network]);
    // The hover of each definition, by its name's span: one pass, not one per symbol.
    let mut hovers: HashMap<(u32, u32), &str> = HashMap::new();
    for r in program.references.iter().filter(|r| r.def_span.file == analysis.main) {
        hovers.entry((r.def_span.start, r.def_span.end)).or_insert(r.hover.as_str());
    }
    // A name nothing refers to (the model's, `loss`) has no reference's hover: what it
    // declares, from its kind (hovering it shows the whole signature; computing that per
    // item would scan the declarations once per name).
    let detail_of = |symbol: &SymbolInfo| match hovers.get(&(symbol.name_span.start, symbol.name_span.end)) {
        Some(hover) => (*hover).to_string(),
        None => format!("{} {}", declared_as(symbol.kind), symbol.name),
    };
    for symbol in &symbols {
        let member = component
            .is_some_and(|c| symbol.container.as_deref() == Some(c.name.as_str()) && within(c.span, symbol.span));
        let rank = match symbol.kind {
            SymbolKind::HyperParam | SymbolKind::Param | SymbolKind::Function if member => RANK_MEMBER,
            SymbolKind::Variant => RANK_FILE,
            _ if symbol.container.is_none() => RANK_FILE,
            _ => continue,
        };
        items.add(&symbol.name, completion_kind(symbol.kind), Some(&detail_of(symbol)), rank);
    }
    // Names imported with `use std::...` (their definitions are in the library).
    for import in program
        .references
        .iter()
        .filter(|r| r.use_span.file == analysis.main && r.def_span.file != analysis.main && r.hover.starts_with("use "))
    {
        let name = file.slice(import.use_span);
        items.add(name, CompletionItemKind::CLASS, Some(&import.hover), RANK_FILE);
    }

    for builtin in Builtin::all() {
        items.add(builtin.name(), CompletionItemKind::FUNCTION, Some("built-in"), RANK_BUILTIN);
    }
    for primitive in PRIMITIVES {
        items.add(primitive, CompletionItemKind::CLASS, Some("parameterized primitive"), RANK_BUILTIN);
    }
    for ty in TYPES {
        items.add(ty, CompletionItemKind::STRUCT, Some("type"), RANK_BUILTIN);
    }
    for keyword in KEYWORDS {
        items.add(keyword, CompletionItemKind::KEYWORD, Some("keyword"), RANK_KEYWORD);
    }
}

/// Members of the expression that ends at the `.` at `dot`.
fn members(analysis: &Analysis, dot: usize, items: &mut Items) {
    let program = analysis.program();
    let Some(ty) = receiver_type(analysis, dot) else {
        return;
    };
    if ty.starts_with('[') && !ty.contains(';') {
        items.add("map", CompletionItemKind::METHOD, Some("xs.map(|x| ...)"), RANK_MEMBER);
        return;
    }
    if let Some(record) = program.records.iter().find(|r| r.name == ty) {
        for field in &record.fields {
            let shown = amp_sema::type_to_string(program, &field.ty);
            items.add(&field.name, CompletionItemKind::FIELD, Some(&shown), RANK_MEMBER);
        }
        return;
    }
    // A layer instance such as `TreeCell(embed, hidden)` exposes its functions.
    let layer = ty.split('(').next().unwrap_or_default();
    if let Some(component) = program.components.iter().find(|c| c.name == layer) {
        for function in &component.fns {
            items.add(&function.name, CompletionItemKind::METHOD, None, RANK_MEMBER);
        }
    }
}

/// The bindings (references whose use is their definition) inside `function` that are
/// visible at `at`: bound before it, in a scope that holds it. Latest first.
fn locals_at(analysis: &Analysis, function: Span, at: usize) -> Vec<&Reference> {
    let program = analysis.program();
    let scopes: HashMap<(u32, u32), Span> = program
        .local_scopes
        .iter()
        .filter(|s| s.def_span.file == analysis.main)
        .map(|s| ((s.def_span.start, s.def_span.end), s.scope))
        .collect();
    let mut bindings: Vec<&Reference> = program
        .references
        .iter()
        .filter(|r| r.use_span == r.def_span && r.def_span.file == analysis.main)
        .filter(|r| within(function, r.def_span) && r.def_span.end as usize <= at)
        .filter(|r| match scopes.get(&(r.def_span.start, r.def_span.end)) {
            Some(scope) => at < scope.end as usize,
            None => true,
        })
        .collect();
    bindings.sort_by_key(|r| std::cmp::Reverse(r.def_span.start));
    bindings
}

/// The type of the receiver of a `.` at `dot`: the longest typed expression ending there;
/// else, when the half-typed line did not parse or check, the chain of names before the
/// dot (`x`, `x.tokens`) resolved from the bindings in scope and the records' fields;
/// else the type of another use of the name before the dot.
fn receiver_type(analysis: &Analysis, dot: usize) -> Option<String> {
    let file = analysis.main_file()?;
    let program = analysis.program();
    let end = file.text[..dot].trim_end().len();
    let typed = program
        .expr_types
        .iter()
        .filter(|(span, _)| span.file == analysis.main && span.end as usize == end)
        .max_by_key(|(span, _)| span.len());
    if let Some((_, ty)) = typed {
        return Some(without_value(ty));
    }
    if let Some(ty) = chain_type(analysis, end) {
        return Some(ty);
    }
    let name_start = ident_start(&file.text, end)?;
    let name = &file.text[name_start..end];
    // The binding of that name nearest before the dot, and any typed use of it.
    let binding = program
        .references
        .iter()
        .filter(|r| r.use_span == r.def_span && r.def_span.file == analysis.main)
        .filter(|r| (r.def_span.end as usize) <= name_start && file.slice(r.def_span) == name)
        .max_by_key(|r| r.def_span.start)?;
    let uses: HashSet<(u32, u32)> = program
        .references
        .iter()
        .filter(|r| r.def_span == binding.def_span)
        .map(|r| (r.use_span.start, r.use_span.end))
        .collect();
    program.expr_types.iter().find(|(span, _)| uses.contains(&(span.start, span.end))).map(|(_, ty)| without_value(ty))
}

/// The start of the identifier that ends at `end`, if one does.
fn ident_start(text: &str, end: usize) -> Option<usize> {
    text[..end]
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
        .last()
        .map(|(i, _)| i)
        .filter(|&i| !text[i..end].starts_with(|c: char| c.is_ascii_digit()))
}

/// The type of `a.b.c` ending at `end`, written before a dot on a line that may not parse:
/// `a` is the nearest binding in scope at `end` (its type is the one its hover shows),
/// each later name a field of the record before it.
fn chain_type(analysis: &Analysis, end: usize) -> Option<String> {
    let file = analysis.main_file()?;
    let program = analysis.program();
    let text = &file.text;
    let mut names = Vec::new();
    let mut cursor = end;
    loop {
        let start = ident_start(text, cursor)?;
        names.push(&text[start..cursor]);
        match text[..start].strip_suffix('.') {
            Some(rest) if !rest.ends_with('.') => cursor = rest.len(),
            _ => break,
        }
    }
    let first_start = cursor - names.last()?.len();
    let function = program
        .symbols
        .iter()
        .filter(|s| s.kind == SymbolKind::Function && s.span.file == analysis.main && s.span.contains(end))
        .min_by_key(|s| s.span.len())?;
    let root = names.pop()?;
    let binding =
        locals_at(analysis, function.span, first_start).into_iter().find(|r| file.slice(r.def_span) == root)?;
    // `var h: f32[hidden] (= ...)` or `x: Example`: the type follows the first `: `.
    let mut ty = without_value(binding.hover.split_once(": ")?.1);
    for field in names.iter().rev() {
        let record = program.records.iter().find(|r| r.name == ty)?;
        let def = record.fields.iter().find(|f| f.name == *field)?;
        ty = amp_sema::type_to_string(program, &def.ty);
    }
    Some(ty)
}

/// `f32[hidden] (= f32[128])` without its ` (= ...)` suffix.
fn without_value(ty: &str) -> String {
    ty.split(" (= ").next().unwrap_or(ty).to_string()
}

/// The word that declares a symbol of `kind`.
fn declared_as(kind: SymbolKind) -> &'static str {
    match kind {
        SymbolKind::Record => "record",
        SymbolKind::Enum => "enum",
        SymbolKind::Variant => "variant",
        SymbolKind::Field => "field",
        SymbolKind::Layer => "layer",
        SymbolKind::Model => "model",
        SymbolKind::Network => "network",
        SymbolKind::Function => "fn",
        SymbolKind::Param => "param",
        SymbolKind::HyperParam => "hyperparameter",
        SymbolKind::Const => "const",
    }
}

fn within(outer: Span, inner: Span) -> bool {
    outer.file == inner.file && outer.start <= inner.start && inner.end <= outer.end
}

fn completion_kind(kind: SymbolKind) -> CompletionItemKind {
    match kind {
        SymbolKind::Record => CompletionItemKind::STRUCT,
        SymbolKind::Enum => CompletionItemKind::ENUM,
        SymbolKind::Variant => CompletionItemKind::ENUM_MEMBER,
        SymbolKind::Field => CompletionItemKind::FIELD,
        SymbolKind::Layer | SymbolKind::Model | SymbolKind::Network => CompletionItemKind::CLASS,
        SymbolKind::Function => CompletionItemKind::FUNCTION,
        SymbolKind::Param => CompletionItemKind::PROPERTY,
        SymbolKind::HyperParam | SymbolKind::Const => CompletionItemKind::CONSTANT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::{example, position_at};

    fn labels(items: &[CompletionItem]) -> Vec<&str> {
        items.iter().map(|i| i.label.as_str()).collect()
    }

    #[test]
    fn in_a_function_locals_members_builtins_and_keywords_are_offered() {
        let analysis = example("list_reduce.amp");
        // Just before `head(h)`: `h` and `x` are bound.
        let items = completion(&analysis, position_at(&analysis, "head(h)", 0, 0), false);
        let names = labels(&items);
        for expected in ["h", "x", "head", "embed", "hidden", "forward", "Example", "relu", "f32", "let"] {
            assert!(names.contains(&expected), "{expected} missing from {names:?}");
        }
        // Locals rank first.
        let h = items.iter().find(|i| i.label == "h").and_then(|i| i.sort_text.clone());
        let relu = items.iter().find(|i| i.label == "relu").and_then(|i| i.sort_text.clone());
        assert!(h < relu);
        // Bindings after the cursor are not offered.
        let at_start = completion(&analysis, position_at(&analysis, "var h", 0, 0), false);
        assert!(!labels(&at_start).contains(&"h"));
    }

    #[test]
    fn after_a_dot_the_fields_of_a_record_are_offered() {
        let analysis = example("list_reduce.amp");
        let items = completion(&analysis, position_at(&analysis, "x.label", 0, 2), false);
        assert_eq!(labels(&items), ["tokens", "label"]);
        assert_eq!(items[0].detail.as_deref(), Some("[int]"));
    }

    #[test]
    fn after_a_dot_on_half_typed_code_the_receiver_is_found_by_name() {
        let text = "record P { a: int, b: int }\n\
                    model M(n: int = 2) {\n    param l = Linear(n, n);\n    \
                    fn forward(p: P) -> f32[n] { let k = p.a; p.\n    }\n}\n";
        let analysis = Analysis::of("half.amp", text, &amp_sema::NoFiles);
        let dot = text.rfind("p.").expect("the half-typed member access") + 2;
        let file = analysis.main_file().expect("main");
        let items = completion(&analysis, crate::convert::position_of(file, dot), false);
        assert_eq!(labels(&items), ["a", "b"]);
    }

    /// With a client that expands snippets, `model`, `match`, `for` and the other
    /// constructs come as templates beside their keywords; without, the keywords alone.
    #[test]
    fn snippets_are_offered_to_clients_that_expand_them() {
        let analysis = example("list_reduce.amp");
        let at = position_at(&analysis, "head(h)", 0, 0);
        let plain = completion(&analysis, at, false);
        assert!(plain.iter().all(|i| i.kind != Some(CompletionItemKind::SNIPPET)));
        let bare: Vec<&str> = plain.iter().filter(|i| i.detail.is_none()).map(|i| i.label.as_str()).collect();
        assert!(bare.is_empty(), "every item says what it is: {bare:?}");
        let items = completion(&analysis, at, true);
        for keyword in ["model", "layer", "match", "for"] {
            let snippet = items.iter().find(|i| i.filter_text.as_deref() == Some(keyword)).expect(keyword);
            assert_eq!(snippet.insert_text_format, Some(lsp_types::InsertTextFormat::SNIPPET));
            assert!(snippet.insert_text.as_deref().is_some_and(|t| t.starts_with(keyword)), "{snippet:?}");
            assert!(items.iter().any(|i| i.label == keyword), "the keyword stays");
        }
    }

    #[test]
    fn a_sequence_offers_map() {
        let analysis = example("ggsnn.amp");
        let items = completion(&analysis, position_at(&analysis, "g.edges.map", 0, 8), false);
        assert_eq!(labels(&items), ["map"]);
    }

    #[test]
    fn imports_and_variants_are_in_scope() {
        let ggsnn = example("ggsnn.amp");
        let items = completion(&ggsnn, position_at(&ggsnn, "head(sum(h))", 0, 0), false);
        assert!(labels(&items).contains(&"GruCell"));
        let tree = example("tree_lstm.amp");
        let items = completion(&tree, position_at(&tree, "Node {", 1, 0), false);
        assert!(labels(&items).contains(&"Leaf"));
    }
}
