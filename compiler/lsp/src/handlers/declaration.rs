//! Hover on declarations: the name of a record, field, enum, variant, model, layer,
//! hyperparameter, `param` or `fn` where it is declared, and the constructor of a `param`
//! (`Linear(2 * hidden, hidden)`, `GruCell(hidden, hidden)`).
//!
//! The checker records references only at uses, so a declaration's name has none; its
//! signature is rendered here from the typed [`Program`], in the forms the uses' hovers
//! already take (`param cell: Linear(2 * hidden, hidden)`, `hidden: int = 128`), so that
//! a name reads the same wherever it is hovered.

use super::doc_at;
use crate::documents::Analysis;
use amp_diagnostics::Span;
use amp_sema::shape::shape_with_values;
use amp_sema::{type_to_string, ComponentDef, FieldDef, FnDef, Instance, Program, SymbolKind, Ty};

/// What a hover on a declaration shows.
pub struct DeclarationHover<'a> {
    /// The hovered name.
    pub span: Span,
    /// The signature, one or more lines of Amp.
    pub signature: String,
    /// The `///` comment, or a built-in's description.
    pub doc: Option<&'a str>,
}

/// The declaration whose name is at `offset` of the document's own file, if any.
pub fn declaration_hover(analysis: &Analysis, offset: usize) -> Option<DeclarationHover<'_>> {
    let program = analysis.program();
    let here = |span: Span| span.file == analysis.main && span.start as usize <= offset && offset <= span.end as usize;
    let found = |span: Span, signature: String| {
        let doc = doc_at(program, span).map(str::trim);
        Some(DeclarationHover { span, signature, doc })
    };
    for record in &program.records {
        if here(record.span) {
            return found(record.span, format!("record {} {{ {} }}", record.name, fields(program, &record.fields)));
        }
        if let Some(field) = record.fields.iter().find(|f| here(f.span)) {
            return found(
                field.span,
                format!("{}.{}: {}", record.name, field.name, type_to_string(program, &field.ty)),
            );
        }
    }
    for e in &program.enums {
        if here(e.span) {
            let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
            return found(e.span, format!("enum {} {{ {} }}", e.name, variants.join(", ")));
        }
        if let Some(variant) = e.variants.iter().find(|v| here(v.span)) {
            let signature = format!("{}::{} {{ {} }}", e.name, variant.name, fields(program, &variant.fields));
            return found(variant.span, signature);
        }
    }
    for component in program.components.iter().filter(|c| c.span.file == analysis.main) {
        if here(component.span) {
            return found(component.span, component_signature(program, component));
        }
        if let Some(hp) = component.hyperparams.iter().find(|h| here(h.span)) {
            return found(hp.span, hyperparam(&hp.name, hp.value));
        }
        if let Some(param) = component.params.iter().find(|p| here(p.span)) {
            return found(param.span, param_signature(program, &param.name, &param.instance));
        }
        if let Some(function) = component.fns.iter().find(|f| here(f.span)) {
            return found(function.span, fn_signature(program, function));
        }
    }
    constructor_hover(analysis, offset)
}

/// On the constructor of a `param`: what the param holds, then what the constructor is
/// (a layer's declaration and doc, or a built-in's description).
fn constructor_hover(analysis: &Analysis, offset: usize) -> Option<DeclarationHover<'_>> {
    let program = analysis.program();
    let text = &analysis.main_file()?.text;
    let (start, end) = word_around(text, offset)?;
    let word = &text[start..end];
    // The param whose name comes last before the word, with only `=` (and the `[` of an
    // array) between them: `param cell = Linear(...)`, `param expert = [Mlp(...); n]`.
    let param = program
        .components
        .iter()
        .filter(|c| c.span.file == analysis.main)
        .flat_map(|c| &c.params)
        .filter(|p| p.span.end as usize <= start)
        .max_by_key(|p| p.span.end)?;
    let between = text.get(param.span.end as usize..start)?;
    if between.trim().trim_end_matches('[').trim_end() != "=" || !text[end..].trim_start().starts_with('(') {
        return None;
    }
    let mut instance: &Instance = &param.instance;
    while let Instance::Array { elem, .. } = instance {
        instance = elem;
    }
    let held = param_signature(program, &param.name, &param.instance);
    let span = Span::new(analysis.main, start, end);
    let (signature, doc) = match instance {
        Instance::Linear { input, output } if word == "Linear" => {
            let weight = shape_with_values(&[output.clone(), input.clone()]);
            let bias = shape_with_values(std::slice::from_ref(output));
            (format!("{held}\nLinear(input, output): weight {weight}, bias {bias}"), Some(LINEAR_DOC))
        }
        Instance::Embedding { count, dim } if word == "Embedding" => {
            let table = shape_with_values(&[count.clone(), dim.clone()]);
            (format!("{held}\nEmbedding(count, dim): weight {table}"), Some(EMBEDDING_DOC))
        }
        Instance::LayerNorm { dim } if word == "LayerNorm" => {
            let vector = shape_with_values(std::slice::from_ref(dim));
            (format!("{held}\nLayerNorm(dim): weight {vector}, bias {vector}"), Some(LAYER_NORM_DOC))
        }
        Instance::Layer { layer, .. } => {
            let layer = program.components.get(layer.0 as usize).filter(|l| l.name == word)?;
            (format!("{held}\n{}", component_signature(program, layer)), doc_at(program, layer.span).map(str::trim))
        }
        _ => return None,
    };
    Some(DeclarationHover { span, signature, doc })
}

const LINEAR_DOC: &str = "A fully connected layer: applied to `x: f32[input]` it gives \
                          `weight x + bias: f32[output]`.";
const EMBEDDING_DOC: &str = "A lookup table: applied to an `int` `i` it gives row `i` of its \
                             weight, `f32[dim]`.";

const LAYER_NORM_DOC: &str = "Layer normalisation with a learned scale and shift: applied to \
                              `x: f32[.., dim]` it gives `layer_norm(x) * weight + bias` over the \
                              last axis (weight starts at ones, bias at zeros).";

/// The identifier around `offset` (a cursor just after it counts), as a byte range.
fn word_around(text: &str, offset: usize) -> Option<(usize, usize)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let offset = offset.min(text.len());
    let start =
        text.get(..offset)?.char_indices().rev().take_while(|(_, c)| is_word(*c)).last().map_or(offset, |(i, _)| i);
    let end = offset + text.get(offset..)?.find(|c: char| !is_word(c)).unwrap_or(text.len() - offset);
    (start < end).then_some((start, end))
}

fn fields(program: &Program, fields: &[FieldDef]) -> String {
    let fields: Vec<String> =
        fields.iter().map(|f| format!("{}: {}", f.name, type_to_string(program, &f.ty))).collect();
    fields.join(", ")
}

/// `hidden: int = 128`, as a use of the hyperparameter shows it.
fn hyperparam(name: &str, value: Option<i64>) -> String {
    match value {
        Some(value) => format!("{name}: int = {value}"),
        None => format!("{name}: int"),
    }
}

fn component_signature(program: &Program, component: &ComponentDef) -> String {
    // The kind is known from the main file's symbols; components from elsewhere (the
    // standard library) are always layers.
    let is_model = program.symbols.iter().any(|s| s.name_span == component.span && s.kind == SymbolKind::Model);
    let keyword = if is_model { "model" } else { "layer" };
    let hyperparams: Vec<String> = component.hyperparams.iter().map(|h| hyperparam(&h.name, h.value)).collect();
    format!("{keyword} {}({})", component.name, hyperparams.join(", "))
}

/// `param cell: Linear(2 * hidden, hidden)`, as a use of the param shows it.
fn param_signature(program: &Program, name: &str, instance: &std::sync::Arc<Instance>) -> String {
    format!("param {name}: {}", type_to_string(program, &Ty::Instance(instance.clone())))
}

pub(super) fn fn_signature(program: &Program, function: &FnDef) -> String {
    let params = fn_params(program, function);
    format!("fn {}({}) -> {}", function.name, params.join(", "), type_to_string(program, &function.ret))
}

/// `name: type` of each parameter of `function`.
pub(super) fn fn_params(program: &Program, function: &FnDef) -> Vec<String> {
    function
        .params
        .iter()
        .filter_map(|p| function.locals.get(p.0 as usize))
        .map(|local| format!("{}: {}", local.name, type_to_string(program, &local.ty)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::offset_of;
    use crate::handlers::test_support::{example, position_at};

    fn hovered(analysis: &Analysis, needle: &str, delta: usize) -> (String, Option<String>) {
        let file = analysis.main_file().expect("the main file");
        let offset = offset_of(file, position_at(analysis, needle, 0, delta));
        let hover = declaration_hover(analysis, offset).unwrap_or_else(|| panic!("a hover on `{needle}`"));
        (hover.signature, hover.doc.map(str::to_string))
    }

    #[test]
    fn every_kind_of_declaration_shows_its_signature() {
        let analysis = example("list_reduce.amp");
        let cases = [
            ("record Example", 8, "record Example { tokens: [int], label: int }"),
            ("tokens: [int]", 2, "Example.tokens: [int]"),
            ("model ListReduce", 7, "model ListReduce(vocab: int = 14, hidden: int = 128, classes: int = 10)"),
            ("hidden: int = 128", 0, "hidden: int = 128"),
            ("cell =", 1, "param cell: Linear(2 * hidden, hidden)"),
            ("fn forward", 4, "fn forward(x: Example) -> f32[classes] (= f32[10])"),
        ];
        for (needle, delta, expected) in cases {
            assert_eq!(hovered(&analysis, needle, delta).0, expected, "on `{needle}`");
        }
        let trees = example("tree_lstm.amp");
        assert_eq!(hovered(&trees, "enum Tree", 6).0, "enum Tree { Leaf, Node }");
        assert_eq!(hovered(&trees, "Leaf {", 1).0, "Tree::Leaf { word: int, label: int }");
    }

    #[test]
    fn constructors_show_what_they_build() {
        let analysis = example("list_reduce.amp");
        let (signature, doc) = hovered(&analysis, "Linear(2 * hidden", 2);
        assert!(signature.starts_with("param cell: Linear(2 * hidden, hidden)\n"), "{signature}");
        assert!(signature.contains("weight f32[hidden, 2 * hidden] (= f32[128, 256])"), "{signature}");
        assert!(doc.is_some_and(|d| d.contains("fully connected")));
        let (signature, _) = hovered(&analysis, "Embedding(vocab", 0);
        assert!(signature.contains("weight f32[vocab, hidden] (= f32[14, 128])"), "{signature}");

        let ggsnn = example("ggsnn.amp");
        let (signature, doc) = hovered(&ggsnn, "GruCell(hidden", 3);
        assert!(signature.ends_with("\nlayer GruCell(input: int, hidden: int)"), "{signature}");
        assert!(doc.is_some_and(|d| d.contains("gated recurrent unit")));
        // An array of layers: the element's constructor.
        let moe = example("moe.amp");
        let (signature, _) = hovered(&moe, "Mlp(d, d, d)", 1);
        assert!(signature.contains("layer Mlp(input: int, hidden: int, output: int)"), "{signature}");
    }

    #[test]
    fn doc_comments_come_with_the_declaration() {
        let text = "/// One example.\nrecord R { v: f32[2] }\n\n/// The whole model.\nmodel M(n: int = 2) {\n    \
                    /// The only layer.\n    param l = Linear(n, n);\n    /// Sums.\n    \
                    fn loss(r: R) -> f32 { sum(l(r.v)) }\n}\n";
        let analysis = Analysis::of("docs.amp", text, &amp_sema::NoFiles);
        assert_eq!(hovered(&analysis, "R {", 0).1.as_deref(), Some("One example."));
        assert_eq!(hovered(&analysis, "M(n", 0).1.as_deref(), Some("The whole model."));
        assert_eq!(hovered(&analysis, "l = Linear", 0).1.as_deref(), Some("The only layer."));
        assert_eq!(hovered(&analysis, "loss", 0).1.as_deref(), Some("Sums."));
    }

    #[test]
    fn uses_and_other_places_are_not_declarations() {
        let analysis = example("list_reduce.amp");
        let file = analysis.main_file().expect("the main file");
        for (needle, delta) in [("head(h)", 0), ("relu(", 1), ("zeros()", 1)] {
            let offset = offset_of(file, position_at(&analysis, needle, 0, delta));
            assert!(declaration_hover(&analysis, offset).is_none(), "on `{needle}`");
        }
    }
}
