//! Whether one space or none separates two neighbouring tokens on a line.

use amp_grammar::lexer::Tok;

/// What a `|` does: closure parameters are the only use of a single pipe in Amp, so each
/// one opens or closes a parameter list, alternately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Plain,
    OpeningPipe,
    ClosingPipe,
    /// `-` or `!` before an operand.
    Unary,
    /// The braces of a `use` group, `use std::nn::{GruCell, Mlp};`, written tight.
    UseGroup,
}

/// Whether `tok` can end an operand, so that a following `(` or `[` is a call or an
/// index and a following `-` is binary.
pub(crate) fn ends_operand(tok: Tok<'_>) -> bool {
    matches!(
        tok,
        Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::InvalidLiteral
            | Tok::True
            | Tok::False
            | Tok::Underscore
            | Tok::RParen
            | Tok::RBracket
            | Tok::RBrace
    )
}

/// Whether a space separates `prev` and `next` (neighbours on one line). The order of the
/// rules matters: the first that applies decides.
pub(crate) fn space_between(prev: Tok<'_>, prev_role: Role, next: Tok<'_>, next_role: Role) -> bool {
    use Tok::*;
    if matches!(prev, LParen | LBracket) {
        return false;
    }
    if matches!(next, RParen | RBracket | Comma | Semi | Colon | Dot | ColonColon) || matches!(prev, Dot | ColonColon) {
        return false;
    }
    if matches!(prev, Comma | Semi | Colon) {
        return true;
    }
    if prev_role == Role::OpeningPipe || next_role == Role::ClosingPipe || prev_role == Role::Unary {
        return false;
    }
    if prev_role == Role::UseGroup && prev == LBrace || next_role == Role::UseGroup && next == RBrace {
        return false;
    }
    if next == LBrace {
        return true;
    }
    if prev == LBrace {
        return next != RBrace;
    }
    if next == RBrace {
        return true;
    }
    if next == DotDot || prev == DotDot {
        return false;
    }
    if matches!(next, LParen | LBracket) {
        return !ends_operand(prev);
    }
    true
}
