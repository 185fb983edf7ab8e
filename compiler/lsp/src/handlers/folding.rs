//! Folding ranges: every `{ ... }` that spans several lines (items, member bodies,
//! blocks, closures, records), block comments over several lines, and runs of two or
//! more lines of `//` or `///` comments. Read from the tokens, not the tree, so a
//! half-typed file still folds where its braces are.

use crate::convert::position_of;
use amp_diagnostics::SourceFile;
use amp_grammar::lexer::{lex, Tok};
use lsp_types::{FoldingRange, FoldingRangeKind};

pub fn folding_ranges(file: &SourceFile) -> Vec<FoldingRange> {
    let line_of = |offset: usize| position_of(file, offset).line;
    let lexed = lex(&file.text);
    let mut ranges = Vec::new();
    let mut open = Vec::new();
    for (start, token, _) in &lexed.tokens {
        match token {
            Tok::LBrace => open.push(*start),
            Tok::RBrace => {
                let Some(brace) = open.pop() else { continue };
                // The closing brace's line stays visible.
                let (first, close) = (line_of(brace), line_of(*start));
                if close > first + 1 {
                    ranges.push(fold(first, close - 1, None));
                }
            }
            _ => {}
        }
    }
    // Comments: `//` and `/* */` with doc comments, by lines.
    let mut comments: Vec<(u32, u32)> = lexed
        .comments
        .iter()
        .copied()
        .chain(lexed.docs.iter().map(|(start, end, _)| (*start, *end)))
        .map(|(start, end)| (line_of(start), line_of(end.saturating_sub(1).max(start))))
        .collect();
    comments.sort_unstable();
    let mut run: Option<(u32, u32)> = None;
    for (first, last) in comments {
        run = match run {
            Some((start, end)) if first <= end + 1 => Some((start, end.max(last))),
            Some((start, end)) => {
                if end > start {
                    ranges.push(fold(start, end, Some(FoldingRangeKind::Comment)));
                }
                Some((first, last))
            }
            None => Some((first, last)),
        };
    }
    if let Some((start, end)) = run.filter(|(start, end)| end > start) {
        ranges.push(fold(start, end, Some(FoldingRangeKind::Comment)));
    }
    ranges.sort_by_key(|r| (r.start_line, r.end_line));
    ranges
}

fn fold(start_line: u32, end_line: u32, kind: Option<FoldingRangeKind>) -> FoldingRange {
    FoldingRange { start_line, start_character: None, end_line, end_character: None, kind, collapsed_text: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amp_diagnostics::LineIndex;

    fn lines(text: &str) -> Vec<(u32, u32, bool)> {
        let file = SourceFile { name: "f.amp".into(), lines: LineIndex::new(text), text: text.into() };
        folding_ranges(&file)
            .into_iter()
            .map(|r| (r.start_line, r.end_line, r.kind == Some(FoldingRangeKind::Comment)))
            .collect()
    }

    #[test]
    fn braces_over_several_lines_and_comment_runs_fold() {
        let text = "/// A record.\n/// Two lines.\nrecord R { a: int }\nmodel M() {\n    fn f() -> int {\n        \
                    // one\n        1\n    }\n    /* a\n       b */\n    fn g() -> int { \"{\"; 2 }\n}\n";
        assert_eq!(lines(text), [(0, 1, true), (3, 10, false), (4, 6, false), (8, 9, true)]);
    }

    #[test]
    fn unbalanced_braces_do_not_panic() {
        assert_eq!(lines("}\n}\nmodel M() {\n  fn f(\n"), []);
    }
}
