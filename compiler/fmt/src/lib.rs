//! `amp-fmt`: the canonical layout of an `.amp` source file.
//!
//! In: the text of one file. Out: the same file laid out canonically, or the file's
//! syntax diagnostics when it does not parse (a file with errors is never rewritten: a
//! formatter working on a broken tree would move text the author has not finished).
//! Depends on `amp-grammar` (its lexer and parser) and `amp-diagnostics` only; pure, no IO.
//! `ampc fmt` and the language server's `textDocument/formatting` are its two shells.
//!
//! Design: the formatter works on the lexer's token stream plus its comment list, not on
//! the tree. Every token and every comment is written back in its order, so formatting
//! can change nothing but whitespace (tested: the lexed tokens and comments of input and
//! output are equal), and a comment stays where it was relative to the tokens around it.
//! The parse serves only as the gate that refuses broken files. What is canonical:
//! - line breaks are the author's: a token starts a line in the output exactly when it
//!   started one in the input; runs of blank lines become one, and none is kept at the
//!   start of the file, after an opening bracket or before a closing one;
//! - indentation is four spaces per open bracket, counted once per line (a line that
//!   opens `(` and `{` indents what follows by one step, as in Rust), plus one step for a
//!   line that continues a statement (the previous line did not end with `;`, `,`, `{` or
//!   `}`) directly inside a block; a line that starts with a closing bracket is indented
//!   like the line that opened it;
//! - spacing within a line is a function of each pair of neighbouring tokens
//!   ([`spacing`]): `f(x, y)`, `a[i]`, `x.y`, `0..n`, `a + -b`, `|x| x`, `{ a }`, `x: T`;
//! - a trailing `//` comment has one space before it; trailing whitespace is removed;
//!   the file ends with one newline.
//!
//! The layout depends only on the tokens, the comments and which of them start a line,
//! all of which it keeps, so formatting is idempotent.

mod layout;
mod spacing;

use amp_diagnostics::{has_errors, Diagnostic, FileId};

/// Why a file was not formatted: its lexing and syntax errors.
#[derive(Clone, Debug)]
pub struct Refused {
    /// The diagnostics of the parse, errors among them.
    pub diagnostics: Vec<Diagnostic>,
}

/// Formats `text`, the source of file `file` (the id only labels the diagnostics).
/// Refuses a file that does not lex and parse cleanly.
pub fn format(file: FileId, text: &str) -> Result<String, Refused> {
    let parsed = amp_grammar::parse(file, text);
    if has_errors(&parsed.diagnostics) {
        return Err(Refused { diagnostics: parsed.diagnostics });
    }
    let lexed = amp_grammar::lexer::lex(text);
    if !lexed.errors.is_empty() {
        // The parse reports every lexing error, so this is unreachable in practice; it
        // keeps the layout's precondition (only tokens, comments and whitespace) local.
        return Err(Refused { diagnostics: parsed.diagnostics });
    }
    Ok(layout::layout(text, &lexed))
}
