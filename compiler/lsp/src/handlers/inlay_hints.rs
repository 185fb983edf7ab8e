//! Inlay hints: the shape the checker inferred for every local whose type is not written
//! (`let`/`var` without annotation, closure parameters, `for` and destructured bindings),
//! shown after its name as `: f32[hidden] (= f32[128])`, from
//! [`amp_sema::Program::inferred_bindings`].

use crate::convert::{offset_of, position_of};
use crate::documents::Analysis;
use lsp_types::{InlayHint, InlayHintKind, InlayHintLabel, Range};

/// The hints of the document's own file whose position lies within `range`, in order.
pub fn inlay_hints(analysis: &Analysis, range: Range) -> Vec<InlayHint> {
    let Some(file) = analysis.main_file() else {
        return Vec::new();
    };
    let (start, end) = (offset_of(file, range.start), offset_of(file, range.end));
    let mut bindings: Vec<_> = analysis
        .program()
        .inferred_bindings
        .iter()
        .filter(|b| b.name_span.file == analysis.main)
        .filter(|b| (start..=end).contains(&(b.name_span.end as usize)))
        .collect();
    // The checker binds a closure's parameters before the name its value goes to.
    bindings.sort_by_key(|b| b.name_span.start);
    bindings
        .into_iter()
        .map(|b| InlayHint {
            position: position_of(file, b.name_span.end as usize),
            label: InlayHintLabel::String(format!(": {}", b.ty)),
            kind: Some(InlayHintKind::TYPE),
            text_edits: None,
            tooltip: None,
            padding_left: None,
            padding_right: None,
            data: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::example;
    use lsp_types::Position;

    fn labels(analysis: &Analysis, range: Range) -> Vec<String> {
        inlay_hints(analysis, range)
            .into_iter()
            .map(|h| match h.label {
                InlayHintLabel::String(s) => s,
                InlayHintLabel::LabelParts(parts) => parts.into_iter().map(|p| p.value).collect(),
            })
            .collect()
    }

    #[test]
    fn inferred_locals_get_hints_and_written_types_do_not() {
        let text = "model M(n: int = 4) {\n    param l = Linear(n, n);\n    \
                    fn forward(x: f32[n]) -> f32[n] {\n        let y = l(x);\n        \
                    let z: f32[n] = y;\n        let (a, b) = (z, 3);\n        z\n    }\n    \
                    fn loss(x: f32[n]) -> f32 { sum(forward(x)) }\n}\n";
        let analysis = Analysis::of("hints.amp", text, &amp_sema::NoFiles);
        let everything = Range::new(Position::new(0, 0), Position::new(99, 0));
        assert_eq!(labels(&analysis, everything), [": f32[n] (= f32[4])", ": f32[n] (= f32[4])", ": int"]);
        // Only line 3 (`let y`).
        let line3 = Range::new(Position::new(3, 0), Position::new(3, 99));
        assert_eq!(labels(&analysis, line3), [": f32[n] (= f32[4])"]);
    }

    #[test]
    fn for_bindings_and_closure_parameters_get_hints() {
        let analysis = example("list_reduce.amp");
        let everything = Range::new(Position::new(0, 0), Position::new(999, 0));
        // `var h: f32[hidden]` is written; `tok` is not.
        assert_eq!(labels(&analysis, everything), [": int"]);
    }
}
