//! Statement-level resynchronisation for half-typed code, on tokens.
//!
//! LR recovery (the `!` rules of the grammar) resumes at the first token that can follow
//! an error, which for an unfinished line such as `let y = x.` is usually somewhere on a
//! later line: `x.` followed by `head(h)` reads as `x.head(h)` and the error lands on the
//! `}` below. An editor wants the error where the user is typing, and the statements
//! after it read as they are.
//!
//! Layout tells where a statement was meant to end: when a statement that contains a
//! syntax error runs over a line break and the next line starts at or left of the
//! statement's own first column with a token that can start a statement, the line before
//! was meant to be the end. The parser is then run again with a virtual `;` there (a
//! zero-width token), and the second tree is kept when it has no more syntax errors than
//! the first. Valid files are parsed once and never see a virtual token; a
//! continuation line indented deeper than its statement is never cut.
//!
//! Every scan here is bounded ([`MAX_STATEMENT_SCAN`] tokens per error), so the cost is
//! linear in the number of errors.

use crate::lexer::Tok;

/// How far back (in tokens) the start of a statement is looked for.
pub(crate) const MAX_STATEMENT_SCAN: usize = 4096;

/// Byte offsets of line starts, for columns and line numbers by binary search.
pub(crate) struct Lines(Vec<usize>);

impl Lines {
    pub(crate) fn new(text: &str) -> Lines {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Lines(starts)
    }

    fn line(&self, offset: usize) -> usize {
        self.0.partition_point(|&s| s <= offset).saturating_sub(1)
    }

    fn column(&self, offset: usize) -> usize {
        offset - self.0.get(self.line(offset)).copied().unwrap_or(0)
    }
}

/// The index of the first token of the statement (or member, or item) that contains the
/// token at `index`: the token after the nearest `;`, `{` or `}` before it at the same
/// bracket depth. Unclosed `(` and `[` do not end the search: the error may be inside them.
pub(crate) fn statement_start(tokens: &[(usize, Tok<'_>, usize)], index: usize) -> usize {
    let index = index.min(tokens.len());
    let floor = index.saturating_sub(MAX_STATEMENT_SCAN);
    let mut depth = 0usize;
    for j in (floor..index).rev() {
        match tokens[j].1 {
            Tok::Semi | Tok::LBrace | Tok::RBrace if depth == 0 => return j + 1,
            Tok::RParen | Tok::RBracket | Tok::RBrace => depth += 1,
            Tok::LParen | Tok::LBracket | Tok::LBrace => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    floor
}

/// Token indices before which a virtual `;` ends a statement that the layout says was
/// left unfinished, one at most per syntax error (at byte offsets `errors`), sorted.
pub(crate) fn unfinished_lines(lines: &Lines, tokens: &[(usize, Tok<'_>, usize)], errors: &[usize]) -> Vec<usize> {
    let mut cuts = Vec::new();
    for &at in errors {
        let error = tokens.partition_point(|t| t.0 < at);
        let Some(&(error_offset, ..)) = tokens.get(error) else {
            continue; // at the end of the file: nothing after it to protect
        };
        let start = statement_start(tokens, error);
        let Some(&(start_offset, ..)) = tokens.get(start) else {
            continue;
        };
        if lines.line(start_offset) == lines.line(error_offset) {
            continue; // the error is on the statement's own line: already in place
        }
        let start_column = lines.column(start_offset);
        for k in start + 1..=error {
            let (previous, next) = (tokens[k - 1], tokens[k]);
            let new_line = lines.line(next.0) > lines.line(previous.2.saturating_sub(1));
            if new_line
                && lines.column(next.0) <= start_column
                && starts_statement(next.1)
                && !matches!(previous.1, Tok::Comma | Tok::Semi | Tok::LBrace | Tok::RBrace)
            {
                cuts.push(k);
                break;
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Whether a line starting with `tok` can be a new statement (or the `}` that ends the
/// block): not `.method()`, an operator or a closing bracket continuing the line above.
fn starts_statement(tok: Tok<'_>) -> bool {
    matches!(
        tok,
        Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Let
            | Tok::Var
            | Tok::For
            | Tok::While
            | Tok::If
            | Tok::Match
            | Tok::True
            | Tok::False
            | Tok::LParen
            | Tok::LBracket
            | Tok::LBrace
            | Tok::RBrace
            | Tok::Bang
            | Tok::Pipe
            | Tok::Fn
            | Tok::Param
            | Tok::Const
    )
}

/// The tokens with a zero-width `;` inserted before each index of `cuts` (sorted), at the
/// end of the token before it. Returns the tokens and the offsets of the virtual `;`s.
pub(crate) fn with_virtual_semicolons<'input>(
    tokens: &[(usize, Tok<'input>, usize)],
    cuts: &[usize],
) -> (Vec<(usize, Tok<'input>, usize)>, Vec<usize>) {
    let mut out = Vec::with_capacity(tokens.len() + cuts.len());
    let mut offsets = Vec::with_capacity(cuts.len());
    let mut next_cut = cuts.iter().peekable();
    for (i, &token) in tokens.iter().enumerate() {
        if next_cut.peek().is_some_and(|&&c| c == i) {
            next_cut.next();
            if let Some(&(_, _, end)) = i.checked_sub(1).and_then(|p| tokens.get(p)) {
                out.push((end, Tok::Semi, end));
                offsets.push(end);
            }
        }
        out.push(token);
    }
    (out, offsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::lex;

    fn cuts(text: &str, error_at: &str) -> Vec<String> {
        let lexed = lex(text);
        let at = text.find(error_at).expect("error marker");
        let found = unfinished_lines(&Lines::new(text), &lexed.tokens, &[at]);
        found.iter().map(|&k| text[lexed.tokens[k - 1].0..lexed.tokens[k - 1].2].to_string()).collect()
    }

    #[test]
    fn a_line_ending_unfinished_is_cut_before_the_next_statement() {
        let text = "fn f() {\n    let y = x.\n    head(h)\n}";
        assert_eq!(cuts(text, "}"), ["."]);
        let text = "fn f() {\n    let y = relu(\n    let z = 1;\n}";
        assert_eq!(cuts(text, "let z"), ["("]);
    }

    #[test]
    fn continuation_lines_indented_deeper_are_kept() {
        let text = "fn f() {\n    let y = foo(\n        a,\n        b c);\n}";
        assert!(cuts(text, "c)").is_empty());
        let text = "fn f() {\n    let y = xs\n    .map(|x| x) z;\n}";
        assert!(cuts(text, "z;").is_empty());
    }

    #[test]
    fn the_statement_start_skips_unclosed_parentheses_and_closed_blocks() {
        let text = "{ a; let y = relu(head(h) }";
        let lexed = lex(text);
        let error = lexed.tokens.len() - 1;
        let start = statement_start(&lexed.tokens, error);
        assert_eq!(lexed.tokens[start].1, Tok::Let);
    }
}
