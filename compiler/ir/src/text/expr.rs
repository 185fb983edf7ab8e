//! State expressions in the text form: `%field`, integers, data paths
//! `$.field[EXPR]`, `len(PATH)`, `!e` and the binary operators, with C precedence and left
//! associativity (the inverse of [`super::expr_text`]).
//!
//! Trees deeper than [`MAX_EXPR_DEPTH`] are rejected: printing, evaluating and dropping a
//! `StateExpr` recurse, so a hostile `1 + 1 + ... + 1` could otherwise overflow the stack
//! long after parsing succeeded.

use super::cursor::{Cursor, PResult};
use super::parse::Parser;
use super::precedence;
use crate::{DataStep, IntOp, StateExpr};

/// The deepest state expression the parser builds.
pub use crate::limits::MAX_EXPR_DEPTH;

/// Nested parentheses and `!` add parser recursion without adding tree depth; this bounds
/// the recursion itself (a few calls per tree level are normal).
const MAX_RECURSION: usize = 4 * MAX_EXPR_DEPTH;

impl Parser {
    /// `[EXPR]`.
    pub(super) fn bracketed_expr(&self, c: &mut Cursor) -> PResult<StateExpr> {
        c.expect("[")?;
        let expr = self.expr(c)?;
        c.expect("]")?;
        Ok(expr)
    }

    /// A whole data path (a `read` op's), checked for depth like an expression.
    pub(super) fn data_path(&self, c: &mut Cursor) -> PResult<Vec<DataStep>> {
        c.skip_spaces();
        let at = c.pos();
        let (path, depth) = self.path(c, 0)?;
        checked_depth(c, at, depth + 1)?;
        Ok(path)
    }

    /// `$` then `.field`, `."field"`, `[EXPR]` and `{VARIANT}` steps. Returns the path and the depth of
    /// its deepest index expression.
    fn path(&self, c: &mut Cursor, recursion: usize) -> PResult<(Vec<DataStep>, usize)> {
        c.expect("$")?;
        let mut path = Vec::new();
        let mut depth = 0;
        loop {
            match c.peek() {
                Some('.') => {
                    c.bump();
                    path.push(DataStep::Field(c.name("a data field name")?));
                }
                Some('[') => {
                    c.bump();
                    let (index, index_depth) = self.binary(c, 1, recursion + 1)?;
                    c.expect("]")?;
                    depth = depth.max(index_depth);
                    path.push(DataStep::Index(Box::new(index)));
                }
                Some('{') => {
                    c.bump();
                    let variant = c.number::<u32>("a variant index")?;
                    c.expect("}")?;
                    path.push(DataStep::Variant(variant));
                }
                _ => return Ok((path, depth)),
            }
        }
    }

    pub(super) fn expr(&self, c: &mut Cursor) -> PResult<StateExpr> {
        self.binary(c, 1, 0).map(|(expr, _)| expr)
    }

    /// Precedence climbing over left-associative operators binding at least `min`.
    /// Returns the expression and its tree depth.
    fn binary(&self, c: &mut Cursor, min: u8, recursion: usize) -> PResult<(StateExpr, usize)> {
        if recursion > MAX_RECURSION {
            return Err(c.error("state expression nested too deeply"));
        }
        let (mut lhs, mut depth) = self.unary(c, recursion + 1)?;
        loop {
            c.skip_spaces();
            let at = c.pos();
            let Some(op) = peek_int_op(c).filter(|op| precedence(*op) >= min) else {
                return Ok((lhs, depth));
            };
            c.eat(op.symbol());
            let (rhs, rhs_depth) = self.binary(c, precedence(op) + 1, recursion + 1)?;
            depth = checked_depth(c, at, depth.max(rhs_depth) + 1)?;
            lhs = StateExpr::bin(op, lhs, rhs);
        }
    }

    fn unary(&self, c: &mut Cursor, recursion: usize) -> PResult<(StateExpr, usize)> {
        if recursion > MAX_RECURSION {
            return Err(c.error("state expression nested too deeply"));
        }
        match c.peek() {
            Some('!') if c.peek_here(1) != Some('=') => {
                let at = c.pos();
                c.bump();
                let (inner, depth) = self.unary(c, recursion + 1)?;
                Ok((StateExpr::Not(Box::new(inner)), checked_depth(c, at, depth + 1)?))
            }
            Some('(') => {
                c.bump();
                let inner = self.binary(c, 1, recursion + 1)?;
                c.expect(")")?;
                Ok(inner)
            }
            Some('%') => Ok((StateExpr::Field(self.field(c)?), 1)),
            Some('$') => {
                let at = c.pos();
                let (path, depth) = self.path(c, recursion + 1)?;
                Ok((StateExpr::Data(path), checked_depth(c, at, depth + 1)?))
            }
            Some('l') if c.eat_word("len") => {
                let at = c.pos();
                c.expect("(")?;
                let (path, depth) = self.path(c, recursion + 1)?;
                c.expect(")")?;
                Ok((StateExpr::Len(path), checked_depth(c, at, depth + 1)?))
            }
            Some(ch) if ch.is_ascii_digit() || (ch == '-' && c.peek_here(1).is_some_and(|d| d.is_ascii_digit())) => {
                let at = c.pos();
                c.bump();
                let digits = c.take_while(|d| d.is_ascii_digit());
                let text = format!("{ch}{digits}");
                let value = text.parse().map_err(|_| c.error_at(at, format!("integer `{text}` is out of range")))?;
                Ok((StateExpr::Const(value), 1))
            }
            _ => Err(c.expected("a state expression")),
        }
    }
}

fn checked_depth(c: &Cursor, at: usize, depth: usize) -> PResult<usize> {
    if depth > MAX_EXPR_DEPTH {
        return Err(c.error_at(at, format!("state expression deeper than {MAX_EXPR_DEPTH}")));
    }
    Ok(depth)
}

fn peek_int_op(c: &Cursor) -> Option<IntOp> {
    use IntOp::*;
    let (a, b) = (c.peek_here(0)?, c.peek_here(1));
    Some(match (a, b) {
        ('=', Some('=')) => Eq,
        ('!', Some('=')) => Ne,
        ('<', Some('=')) => Le,
        ('>', Some('=')) => Ge,
        ('&', Some('&')) => And,
        ('|', Some('|')) => Or,
        ('<', _) => Lt,
        ('>', _) => Gt,
        ('+', _) => Add,
        ('-', _) => Sub,
        ('*', _) => Mul,
        ('/', _) => Div,
        ('%', _) => Rem,
        _ => return None,
    })
}
