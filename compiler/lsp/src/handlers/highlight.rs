//! Document highlight: every occurrence in the file of what the name under the cursor
//! names, from the checker's reference table: its definition (kind `Write`) and its uses
//! (`Read`). The cursor may be on a use or on the definition itself.

use super::{closeness, reference_at};
use crate::convert::{offset_of, range_of};
use crate::documents::Analysis;
use lsp_types::{DocumentHighlight, DocumentHighlightKind, Position};

pub fn document_highlight(analysis: &Analysis, position: Position) -> Vec<DocumentHighlight> {
    let Some(file) = analysis.main_file() else {
        return Vec::new();
    };
    let offset = offset_of(file, position);
    let references = &analysis.program().references;
    // A definition that no reference uses at its own place (a `fn` or `param` name) is
    // found by the definitions that contain the cursor.
    let target = reference_at(analysis, offset).map(|r| r.def_span).or_else(|| {
        references
            .iter()
            .map(|r| r.def_span)
            .filter(|def| def.file == analysis.main)
            .filter_map(|def| Some((closeness(def, offset)?, def)))
            .min_by_key(|(key, _)| *key)
            .map(|(_, def)| def)
    });
    let Some(target) = target else {
        return Vec::new();
    };
    let mut spans: Vec<_> = references
        .iter()
        .filter(|r| r.def_span == target && r.use_span.file == analysis.main)
        .map(|r| r.use_span)
        .chain((target.file == analysis.main).then_some(target))
        .collect();
    spans.sort_by_key(|s| (s.start, s.end));
    spans.dedup();
    spans
        .into_iter()
        .map(|span| DocumentHighlight {
            range: range_of(file, span),
            kind: Some(if span == target { DocumentHighlightKind::WRITE } else { DocumentHighlightKind::READ }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::{example, position_at};

    fn highlighted(analysis: &Analysis, position: Position) -> Vec<(u32, u32, bool)> {
        document_highlight(analysis, position)
            .into_iter()
            .map(|h| (h.range.start.line, h.range.start.character, h.kind == Some(DocumentHighlightKind::WRITE)))
            .collect()
    }

    #[test]
    fn a_local_highlights_its_binding_and_uses_from_either() {
        let analysis = example("list_reduce.amp");
        // `var h` (line 10), `h = ...` and `, h)` (line 12), `head(h)` (line 14).
        let expected = [(10, 12, true), (12, 12, false), (12, 45, false), (14, 13, false)];
        assert_eq!(highlighted(&analysis, position_at(&analysis, "head(h)", 0, 5)), expected);
        assert_eq!(highlighted(&analysis, position_at(&analysis, "var h", 0, 4)), expected);
    }

    #[test]
    fn nothing_outside_names() {
        let analysis = example("list_reduce.amp");
        assert_eq!(highlighted(&analysis, Position::new(0, 0)), []);
    }
}
