//! Signature help: inside the argument list of a call, the callee's parameters with the
//! one being typed marked.
//!
//! The call is found in the text before the cursor, not in the syntax tree, so that it
//! works while the line does not parse yet (`let y = concat(a, `): the innermost `(` left
//! open before the cursor, with a name just before it, and the commas at its top level
//! give the active parameter. The name is resolved as a built-in (its parameters and
//! shape rule as the checker's notes show them), then a `fn` of a component of the
//! document, then a `param` of one, whose call is its layer's `apply` (or `Linear`'s and
//! `Embedding`'s input).

use crate::convert::offset_of;
use crate::documents::Analysis;
use amp_sema::shape::shape_with_values;
use amp_sema::{type_to_string, Builtin, FnDef, Instance, Program};
use lsp_types::{
    Documentation, MarkupContent, MarkupKind, ParameterInformation, ParameterLabel, Position, SignatureHelp,
    SignatureInformation,
};

/// How far back from the cursor the open `(` is looked for.
const MAX_LOOKBACK: usize = 4096;

pub fn signature_help(analysis: &Analysis, position: Position) -> Option<SignatureHelp> {
    let file = analysis.main_file()?;
    let offset = offset_of(file, position).min(file.text.len());
    let (callee, commas) = open_call(&file.text[..offset])?;
    let signatures = signatures_of(analysis.program(), analysis.main, callee);
    if signatures.is_empty() {
        return None;
    }
    let active = signatures.first().map_or(0, |s| active_parameter(s, commas));
    Some(SignatureHelp { signatures, active_signature: Some(0), active_parameter: Some(active) })
}

/// The callee's name and the number of top-level commas of the innermost call left open at
/// the end of `before`, if the cursor is inside one.
fn open_call(before: &str) -> Option<(&str, usize)> {
    let start = before.len().saturating_sub(MAX_LOOKBACK);
    let start = (start..=before.len()).find(|i| before.is_char_boundary(*i))?;
    let window = &before[start..];
    // Comments would hide or add brackets: blank out `//` to the end of each line.
    let mut depth = 0usize;
    let mut commas = 0usize;
    let bytes: Vec<u8> = strip_comments(window);
    for i in (0..bytes.len()).rev() {
        match bytes[i] {
            b')' | b']' => depth += 1,
            b'(' | b'[' if depth > 0 => depth -= 1,
            b'(' => {
                let name_end = window[..i].trim_end().len();
                let name_start = window[..name_end]
                    .char_indices()
                    .rev()
                    .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
                    .last()
                    .map_or(name_end, |(j, _)| j);
                let name = &window[name_start..name_end];
                let is_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
                return is_name.then_some((name, commas));
            }
            // An index `[` left open: the cursor is not in an argument list of its own.
            b'[' => return None,
            b',' if depth == 0 => commas += 1,
            // A block or statement boundary at the top level: not inside a call.
            b'{' | b'}' | b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// `text` with every `//` comment replaced by spaces, byte for byte.
fn strip_comments(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'/' && bytes[i + 1] == b'/' {
            while i < bytes.len() && bytes[i] != b'\n' {
                bytes[i] = b' ';
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    bytes
}

/// The active parameter for `commas` commas: the last one for extra arguments (so that a
/// variadic `...` stays marked).
fn active_parameter(signature: &SignatureInformation, commas: usize) -> u32 {
    let count = signature.parameters.as_ref().map_or(0, Vec::len);
    u32::try_from(commas.min(count.saturating_sub(1))).unwrap_or(0)
}

fn signatures_of(program: &Program, main: amp_diagnostics::FileId, callee: &str) -> Vec<SignatureInformation> {
    if let Some(builtin) = Builtin::from_name(callee) {
        return builtin
            .signature()
            .split("  or  ")
            .filter_map(|overload| {
                let open = overload.find('(')?;
                let close = matching_paren(overload, open)?;
                let params = split_top_level(&overload[open + 1..close]);
                let ret = overload[close + 1..].trim().trim_start_matches("->").trim();
                Some(signature(callee, &params, ret, None))
            })
            .collect();
    }
    let own = || program.components.iter().filter(|c| c.span.file == main);
    if let Some(function) = own().flat_map(|c| &c.fns).find(|f| f.name == callee) {
        return vec![fn_signature(program, callee, function)];
    }
    if let Some(param) = own().flat_map(|c| &c.params).find(|p| p.name == callee) {
        return match param.instance.as_ref() {
            Instance::Linear { input, output } => {
                let (input, output) =
                    (shape_with_values(std::slice::from_ref(input)), shape_with_values(std::slice::from_ref(output)));
                vec![signature(callee, &[format!("x: {input}")], &output, None)]
            }
            Instance::Embedding { dim, .. } => {
                let row = shape_with_values(std::slice::from_ref(dim));
                vec![signature(callee, &["i: int".to_string()], &row, None)]
            }
            Instance::LayerNorm { dim } => {
                let x = shape_with_values(std::slice::from_ref(dim));
                vec![signature(callee, &[format!("x: {x}")], &x, None)]
            }
            Instance::Layer { layer, .. } => {
                let Some(layer) = program.components.get(layer.0 as usize) else {
                    return Vec::new();
                };
                let Some(apply) = layer.fn_named("apply").map(|i| &layer.fns[i]) else {
                    return Vec::new();
                };
                let doc = format!(
                    "`{}.apply`{}",
                    layer.name,
                    layer.doc.as_deref().map_or(String::new(), |d| format!("\n\n{}", d.trim()))
                );
                let mut info = fn_signature(program, callee, apply);
                info.documentation = Some(markdown(doc));
                vec![info]
            }
            Instance::Array { .. } => Vec::new(),
        };
    }
    Vec::new()
}

fn fn_signature(program: &Program, callee: &str, function: &FnDef) -> SignatureInformation {
    let params = super::declaration::fn_params(program, function);
    let ret = type_to_string(program, &function.ret);
    signature(callee, &params, &ret, function.doc.as_deref())
}

/// `name(params) -> ret`, each parameter labelled by its UTF-16 offsets in the label.
fn signature(name: &str, params: &[String], ret: &str, doc: Option<&str>) -> SignatureInformation {
    let units = |s: &str| u32::try_from(s.encode_utf16().count()).unwrap_or(u32::MAX);
    let mut label = format!("{name}(");
    let mut parameters = Vec::new();
    for (i, param) in params.iter().enumerate() {
        if i > 0 {
            label.push_str(", ");
        }
        let start = units(&label);
        label.push_str(param);
        parameters.push(ParameterInformation {
            label: ParameterLabel::LabelOffsets([start, units(&label)]),
            documentation: None,
        });
    }
    label.push(')');
    if !ret.is_empty() && ret != "()" {
        label.push_str(" -> ");
        label.push_str(ret);
    }
    SignatureInformation {
        label,
        documentation: doc.map(|d| markdown(d.trim().to_string())),
        parameters: Some(parameters),
        active_parameter: None,
    }
}

fn markdown(value: String) -> Documentation {
    Documentation::MarkupContent(MarkupContent { kind: MarkupKind::Markdown, value })
}

/// The index of the `)` that closes the `(` at `open`.
fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices().skip_while(|(i, _)| *i < open) {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` split at its top-level commas, each part trimmed; nothing for blank text.
fn split_top_level(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(text[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text[start..].trim().is_empty() {
        parts.push(text[start..].trim().to_string());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_call_and_its_commas_come_from_the_text() {
        assert_eq!(open_call("let y = relu("), Some(("relu", 0)));
        assert_eq!(open_call("let y = concat(a, f(b, c), "), Some(("concat", 2)));
        assert_eq!(open_call("let y = concat(a, f(b, "), Some(("f", 1)));
        assert_eq!(open_call("let y = x[cell(a, "), Some(("cell", 1)));
        assert_eq!(open_call("let y = relu(x); let z = "), None);
        assert_eq!(open_call("let y = (a, "), None);
        assert_eq!(open_call("f(a, // (\n b, "), Some(("f", 2)));
    }

    #[test]
    fn builtins_list_their_parameters_and_overloads() {
        let text = "model M(n: int = 2) {\n    fn loss(x: f32[n]) -> f32 { sum(x) }\n}\n";
        let analysis = Analysis::of("m.amp", text, &amp_sema::NoFiles);
        let program = analysis.program();
        let concat = signatures_of(program, analysis.main, "concat");
        assert_eq!(concat[0].label, "concat(a: f32[n], b: f32[m], ...) -> f32[n + m + ...]");
        assert_eq!(active_parameter(&concat[0], 7), 2);
        assert_eq!(signatures_of(program, analysis.main, "sum").len(), 2);
        let fns = signatures_of(program, analysis.main, "loss");
        assert_eq!(fns[0].label, "loss(x: f32[n] (= f32[2])) -> f32");
    }
}
