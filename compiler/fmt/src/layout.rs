//! Lays out a file's tokens and comments: line breaks kept, indentation and spacing
//! computed (the rules are listed in the crate's documentation).

use crate::spacing::{ends_operand, space_between, Role};
use amp_grammar::lexer::{Lexed, Tok};

/// A token or a comment (doc comments included), with its byte range in the source.
#[derive(Clone, Copy)]
struct Piece<'t> {
    start: usize,
    end: usize,
    /// `None` for a comment.
    token: Option<Tok<'t>>,
}

/// What the spacing rules need of the previous piece on the line.
#[derive(Clone, Copy)]
enum Previous<'t> {
    Token(Tok<'t>, Role),
    Comment,
}

const INDENT: &str = "    ";

fn opens(tok: Tok<'_>) -> bool {
    matches!(tok, Tok::LParen | Tok::LBracket | Tok::LBrace)
}

fn closes(tok: Tok<'_>) -> bool {
    matches!(tok, Tok::RParen | Tok::RBracket | Tok::RBrace)
}

/// Tokens, comments and doc comments in source order.
fn pieces<'t>(lexed: &Lexed<'t>) -> Vec<Piece<'t>> {
    let mut pieces: Vec<Piece<'t>> =
        lexed.tokens.iter().map(|&(start, tok, end)| Piece { start, end, token: Some(tok) }).collect();
    pieces.extend(lexed.comments.iter().map(|&(start, end)| Piece { start, end, token: None }));
    pieces.extend(lexed.docs.iter().map(|&(start, end, _)| Piece { start, end, token: None }));
    pieces.sort_by_key(|p| p.start);
    pieces
}

/// The formatted text. `lexed` must be the lexing of `text` without errors, so that the
/// gaps between its pieces are whitespace only.
pub(crate) fn layout(text: &str, lexed: &Lexed<'_>) -> String {
    let pieces = pieces(lexed);
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    // Each open bracket with the indentation of the line that opened it, and whether it
    // opens a `use` group.
    let mut open: Vec<(Tok<'_>, usize, bool)> = Vec::new();
    let mut pipe_open = false;
    let mut last_token: Option<Tok<'_>> = None;
    let mut previous: Option<Previous<'_>> = None;
    let mut line_ends_with_opener = false;
    let mut current_indent = 0;
    let mut previous_end = 0;
    for piece in &pieces {
        let newlines = text.get(previous_end..piece.start).map_or(0, |gap| gap.matches('\n').count());
        let role = match piece.token {
            Some(Tok::Pipe) => {
                pipe_open = !pipe_open;
                if pipe_open {
                    Role::OpeningPipe
                } else {
                    Role::ClosingPipe
                }
            }
            Some(Tok::Bang) => Role::Unary,
            Some(Tok::LBrace) if last_token == Some(Tok::ColonColon) => Role::UseGroup,
            Some(Tok::RBrace) if open.last().is_some_and(|o| o.2) => Role::UseGroup,
            Some(Tok::Minus) if !last_token.is_some_and(ends_operand) => Role::Unary,
            _ => Role::Plain,
        };
        let closing = piece.token.is_some_and(closes);
        match previous {
            None => {}
            Some(_) if newlines > 0 => {
                out.push('\n');
                if newlines >= 2 && !line_ends_with_opener && !closing {
                    out.push('\n');
                }
            }
            Some(prev) => {
                let space = match (prev, piece.token) {
                    (Previous::Token(p, prev_role), Some(next)) => space_between(p, prev_role, next, role),
                    (Previous::Token(p, _), None) => !matches!(p, Tok::LParen | Tok::LBracket),
                    (Previous::Comment, Some(next)) => {
                        !matches!(next, Tok::RParen | Tok::RBracket | Tok::Comma | Tok::Semi)
                    }
                    (Previous::Comment, None) => true,
                };
                if space {
                    out.push(' ');
                }
            }
        }
        if previous.is_none() || newlines > 0 {
            current_indent = line_indent(&open, last_token, closing);
            for _ in 0..current_indent {
                out.push_str(INDENT);
            }
        }
        let source = text.get(piece.start..piece.end).unwrap_or("");
        match piece.token {
            // A line comment's trailing whitespace (a `\r` among it) is not part of it.
            None if source.starts_with("//") => out.push_str(source.trim_end()),
            _ => out.push_str(source),
        }
        if let Some(tok) = piece.token {
            if opens(tok) {
                open.push((tok, current_indent, role == Role::UseGroup));
            } else if closes(tok) {
                // A line that closes a bracket opened on a less indented line goes on at
                // that line's level: `    b: int) {` opens its block at the level of
                // `model M(`, so the body is one step in from the item.
                if let Some((_, indent, _)) = open.pop() {
                    current_indent = current_indent.min(indent);
                }
            }
            last_token = Some(tok);
            previous = Some(Previous::Token(tok, role));
            line_ends_with_opener = opens(tok);
        } else {
            previous = Some(Previous::Comment);
            line_ends_with_opener = false;
        }
        previous_end = piece.end;
    }
    if !pieces.is_empty() {
        out.push('\n');
    }
    out
}

/// The indentation (in steps) of a line that starts after `last_token`, with brackets
/// `open` still open, and that starts with a closing bracket when `closing`.
fn line_indent(open: &[(Tok<'_>, usize, bool)], last_token: Option<Tok<'_>>, closing: bool) -> usize {
    let innermost = open.last();
    if closing {
        // Where the bracket it closes was opened.
        return innermost.map_or(0, |&(_, indent, _)| indent);
    }
    let base = innermost.map_or(0, |&(_, indent, _)| indent + 1);
    // Inside parentheses and square brackets every line is an element or a continuation
    // of one, one step in; directly in a block (or at the top), a line after anything but
    // the end of a statement, an item or an element continues the line before.
    let in_block = innermost.is_none_or(|&(tok, _, _)| tok == Tok::LBrace);
    let continues = last_token.is_some_and(|t| !matches!(t, Tok::Semi | Tok::Comma | Tok::LBrace | Tok::RBrace));
    if in_block && continues {
        base + 1
    } else {
        base
    }
}
