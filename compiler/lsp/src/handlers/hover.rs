//! Hover: the type and shape of the name or expression under the cursor.
//!
//! A name (a use or a binding) shows the checker's hover text, e.g.
//! `var h: f32[hidden] (= f32[128])`, and the doc comment of what it names; a declaration's
//! name or a `param`'s constructor shows its signature and doc (`declaration`); elsewhere
//! the innermost typed expression shows `expression: type`. A network's name where it is
//! declared shows its inference factor under the streaming and sequential rollouts.

use super::declaration::declaration_hover;
use super::{doc_at, expr_type_at, final_definition, reference_at};
use crate::convert::{line_length_utf16, offset_of, range_of};
use crate::documents::Analysis;
use amp_sema::rollout::{inference_factor, Pattern, RolloutGraph};
use amp_sema::NetworkDef;
use lsp_types::{Hover, HoverContents, MarkupContent, MarkupKind, Position};

/// Expressions longer than this are not repeated in the hover, only their type is shown.
const MAX_SHOWN_EXPRESSION: usize = 40;

pub fn hover(analysis: &Analysis, position: Position) -> Option<Hover> {
    let file = analysis.main_file()?;
    // Past a line's end there is nothing to show (clamped, it was the enclosing arm's type).
    if position.character as usize > line_length_utf16(file, position.line as usize) {
        return None;
    }
    let offset = offset_of(file, position);
    let network = analysis.program().networks.iter().find(|n| n.span.file == analysis.main && n.span.contains(offset));
    if let Some(network) = network {
        return Some(markdown(network_hover(network), Some(range_of(file, network.span))));
    }
    if let Some(declared) = declaration_hover(analysis, offset) {
        return Some(markdown(
            with_doc(code_block(&declared.signature), declared.doc),
            Some(range_of(file, declared.span)),
        ));
    }
    if let Some(reference) = reference_at(analysis, offset) {
        let mut value = code_block(&reference.hover);
        let definition = final_definition(analysis.program(), reference);
        if let Some(doc) = doc_at(analysis.program(), definition) {
            value.push_str("\n\n---\n\n");
            value.push_str(doc.trim());
        }
        return Some(markdown(value, Some(range_of(file, reference.use_span))));
    }
    let (span, ty) = expr_type_at(analysis, offset)?;
    let expression = file.slice(span);
    let shown = if expression.len() <= MAX_SHOWN_EXPRESSION && !expression.contains('\n') {
        format!("{expression}: {ty}")
    } else {
        ty.to_string()
    };
    Some(markdown(code_block(&shown), Some(range_of(file, span))))
}

/// `network Name` and F(R) of its streaming and sequential rollouts (both always valid:
/// the first delays every edge, the second leaves only edges to later nodes undelayed).
fn network_hover(network: &NetworkDef) -> String {
    let graph = RolloutGraph::of_network(network);
    let factor = |pattern: Pattern| {
        inference_factor(&graph, &pattern).map_or_else(|_| "not valid".to_string(), |f| f.to_string())
    };
    format!(
        "{}\n\ninference factor F(R): streaming {}, sequential {} ({} edges; `ampc rollout` for more)",
        code_block(&format!("network {}", network.name)),
        factor(Pattern::streaming(&graph)),
        factor(Pattern::sequential(&graph)),
        graph.edges.len()
    )
}

/// `value` followed by a rule and `doc`, if there is one.
fn with_doc(mut value: String, doc: Option<&str>) -> String {
    if let Some(doc) = doc {
        value.push_str("\n\n---\n\n");
        value.push_str(doc);
    }
    value
}

fn code_block(text: &str) -> String {
    format!("```amp\n{text}\n```")
}

fn markdown(value: String, range: Option<lsp_types::Range>) -> Hover {
    Hover { contents: HoverContents::Markup(MarkupContent { kind: MarkupKind::Markdown, value }), range }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::{example, position_at};

    fn hover_text(analysis: &Analysis, position: Position) -> String {
        match hover(analysis, position).map(|h| h.contents) {
            Some(HoverContents::Markup(markup)) => markup.value,
            other => panic!("expected markdown, got {other:?}"),
        }
    }

    #[test]
    fn a_local_shows_its_symbolic_and_concrete_shape() {
        let analysis = example("list_reduce.amp");
        let at_h = position_at(&analysis, "head(h)", 0, 5);
        let text = hover_text(&analysis, at_h);
        assert!(text.contains("h: f32[hidden] (= f32[128])"), "{text}");
        // The binding itself hovers too.
        let at_binding = position_at(&analysis, "var h", 0, 4);
        assert!(hover_text(&analysis, at_binding).contains("f32[hidden]"));
    }

    #[test]
    fn an_expression_without_a_name_shows_its_type() {
        let analysis = example("list_reduce.amp");
        // On the space after the comma of `concat(embed(tok), h)`: the call, no name.
        let at_call = position_at(&analysis, "concat(embed(tok), h)", 0, 18);
        let text = hover_text(&analysis, at_call);
        assert!(text.contains("concat(embed(tok), h): f32[2 * hidden]"), "{text}");
    }

    #[test]
    fn a_stdlib_layer_shows_its_doc_comment() {
        let analysis = example("ggsnn.amp");
        let at_layer = position_at(&analysis, "GruCell(hidden", 0, 2);
        let text = hover_text(&analysis, at_layer);
        assert!(text.contains("layer GruCell"), "{text}");
        assert!(text.contains("gated recurrent unit"), "{text}");
    }

    #[test]
    fn positions_after_non_ascii_comments_count_utf16_units() {
        let text = "model M(n: int = 3) {\n    param l = Linear(n, n);\n    \
                    fn forward(x: f32[n]) -> f32[n] { /* é𝄞 */ l(x) }\n    \
                    fn loss(x: f32[n]) -> f32 { sum(forward(x)) }\n}\n";
        let analysis = Analysis::of("utf16.amp", text, &amp_sema::NoFiles);
        let line = text.lines().nth(2).expect("line 2");
        let byte_column = line.find("l(x)").expect("the call") + 2;
        // `é` is 2 bytes but 1 unit, `𝄞` 4 bytes but 2 units.
        let column = u32::try_from(byte_column - 3).expect("small");
        let hovered = hover_text(&analysis, Position::new(2, column));
        assert!(hovered.contains("x: f32[n]"), "{hovered}");
        let range = hover(&analysis, Position::new(2, column)).and_then(|h| h.range);
        assert_eq!(range, Some(lsp_types::Range::new(Position::new(2, column), Position::new(2, column + 1))));
    }

    #[test]
    fn a_network_name_shows_its_inference_factors() {
        let text = "network Deep {\n    input x: f32[4];\n    node a = Linear(8, 4) from x, a;\n    \
                    node b = Linear(4, 4) from a;\n    output y = Linear(4, 2) from b;\n}\n";
        let analysis = Analysis::of("deep.amp", text, &amp_sema::NoFiles);
        let at_name = position_at(&analysis, "Deep", 0, 1);
        let hovered = hover_text(&analysis, at_name);
        assert!(hovered.contains("network Deep"), "{hovered}");
        assert!(hovered.contains("streaming 1, sequential 3 (4 edges"), "{hovered}");
        // A node's name is not the network's.
        let at_node = position_at(&analysis, "node b", 0, 5);
        assert!(!hover(&analysis, at_node).is_some_and(|h| format!("{h:?}").contains("inference factor")));
    }

    #[test]
    fn nothing_to_show_outside_any_expression() {
        let analysis = example("list_reduce.amp");
        assert!(hover(&analysis, Position::new(0, 0)).is_none());
        assert!(hover(&analysis, Position::new(999, 999)).is_none());
    }
}
