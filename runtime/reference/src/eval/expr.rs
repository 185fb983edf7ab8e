//! Expressions: literals, names, operators, fields, indexing, `map`, `if` and `match`.

use super::{bind, check_range_len, unevaluable, At, Evaluator, Frame, R};
use crate::error::{ErrorKind, RefError};
use crate::params::Bound;
use crate::tape::{BinaryFn, UnaryFn};
use crate::value::Val;
use amp_grammar::ast::{BinOp, UnOp};
use amp_grammar::Span;
use amp_sema::{Block, Expr, ExprKind, FnId, MatchArm, Pattern};
use std::rc::Rc;

impl<'r> Evaluator<'r> {
    /// Evaluates `e`. Each arm beyond the trivial ones is its own function: program
    /// recursion nests this frame, and unoptimised builds give every arm's temporaries
    /// their own stack slots.
    pub(crate) fn expr(&mut self, f: &mut Frame<'r>, e: &'r Expr) -> R<Val<'r>> {
        let span = e.span;
        self.check_stack(span)?;
        match &e.kind {
            ExprKind::Int(v) => Ok(Val::Int(*v)),
            ExprKind::Float(v) => Ok(Val::Tensor(self.tape.scalar(*v as f32))),
            ExprKind::Bool(v) => Ok(Val::Bool(*v)),
            ExprKind::Local(id) => f.get(*id, span),
            ExprKind::Hyper(dim) => Ok(Val::Int(self.dim(f.ctx, dim, span)?)),
            ExprKind::Param(p) => param(f, *p, span),
            ExprKind::Unary(op, x) => self.unary(f, *op, x, span),
            ExprKind::Binary(op, a, b) => self.binary(f, *op, a, b, span),
            ExprKind::Range(lo, hi) => self.range(f, lo, hi, span),
            ExprKind::Builtin(b, args) => self.builtin(f, *b, args, e),
            ExprKind::CallFn(id, args) => self.call(f, *id, args, span),
            ExprKind::CallInstance { callee, call, args } => self.call_instance(f, callee, call, args, span),
            ExprKind::Field(x, i) => self.field(f, x, *i, span),
            ExprKind::TupleField(x, i) => self.tuple_field(f, x, *i, span),
            ExprKind::Index(x, i) => self.index(f, x, i, span),
            ExprKind::Tuple(items) => self.exprs(f, items).map(|v| Val::Tuple(v.into())),
            ExprKind::List(items) => self.exprs(f, items).map(|v| Val::Seq(v.into())),
            ExprKind::Map { seq, param, body } => self.map(f, seq, param, body),
            ExprKind::If(cond, then, els) => self.if_else(f, cond, then, els.as_deref()),
            ExprKind::Match(scrutinee, arms) => self.match_arms(f, scrutinee, arms, span),
            ExprKind::Block(block) => self.block(f, block),
            ExprKind::Error => Err(unevaluable(span, "an expression the checker rejected")),
        }
    }

    fn unary(&mut self, f: &mut Frame<'r>, op: UnOp, x: &'r Expr, span: Span) -> R<Val<'r>> {
        match (op, self.expr(f, x)?) {
            (UnOp::Neg, Val::Int(i)) => i.checked_neg().map(Val::Int).ok_or(ErrorKind::Overflow).at(span),
            (UnOp::Neg, Val::Tensor(t)) => Ok(Val::Tensor(self.tape.unary(UnaryFn::Neg, t).at(span)?)),
            (UnOp::Not, Val::Bool(b)) => Ok(Val::Bool(!b)),
            (UnOp::Neg, other) => type_error(span, "an int or a tensor", &other),
            (UnOp::Not, other) => type_error(span, "a bool", &other),
        }
    }

    fn range(&mut self, f: &mut Frame<'r>, lo: &'r Expr, hi: &'r Expr, span: Span) -> R<Val<'r>> {
        let lo = self.expr(f, lo)?.int().at(lo.span)?;
        let hi = self.expr(f, hi)?.int().at(hi.span)?;
        int_range(lo, hi).at(span)
    }

    fn call(&mut self, f: &mut Frame<'r>, id: FnId, args: &'r [Expr], span: Span) -> R<Val<'r>> {
        let vals = self.exprs(f, args)?;
        self.call_fn(f.ctx, id, vals, span)
    }

    fn field(&mut self, f: &mut Frame<'r>, x: &'r Expr, i: u32, span: Span) -> R<Val<'r>> {
        match self.expr(f, x)? {
            Val::Record(fields) => {
                fields.get(i as usize).cloned().ok_or_else(|| unevaluable(span, "a field the record does not have"))
            }
            other => type_error(span, "a record", &other),
        }
    }

    fn tuple_field(&mut self, f: &mut Frame<'r>, x: &'r Expr, i: u32, span: Span) -> R<Val<'r>> {
        match self.expr(f, x)? {
            Val::Tuple(items) => {
                items.get(i as usize).cloned().ok_or_else(|| unevaluable(span, "an element the tuple does not have"))
            }
            other => type_error(span, "a tuple", &other),
        }
    }

    fn map(&mut self, f: &mut Frame<'r>, seq: &'r Expr, param: &'r Pattern, body: &'r Expr) -> R<Val<'r>> {
        let items = self.expr(f, seq)?.seq().at(seq.span)?.clone();
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            bind(f, param, item.clone(), seq.span)?;
            out.push(self.in_context(i as i64, |ev| ev.expr(f, body))?);
        }
        Ok(Val::Seq(out.into()))
    }

    fn if_else(&mut self, f: &mut Frame<'r>, cond: &'r Expr, then: &'r Block, els: Option<&'r Expr>) -> R<Val<'r>> {
        if self.expr(f, cond)?.bool().at(cond.span)? {
            self.block(f, then)
        } else {
            match els {
                Some(els) => self.expr(f, els),
                None => Ok(Val::unit()),
            }
        }
    }

    pub(super) fn exprs(&mut self, f: &mut Frame<'r>, es: &'r [Expr]) -> R<Vec<Val<'r>>> {
        es.iter().map(|e| self.expr(f, e)).collect()
    }

    /// `xs[i]` (an element of a sequence), `v[i]` (an element or row of a tensor, with
    /// gradient), `experts[i]` (an element of a parameter array).
    fn index(&mut self, f: &mut Frame<'r>, x: &'r Expr, i: &'r Expr, span: Span) -> R<Val<'r>> {
        let obj = self.expr(f, x)?;
        let index = self.expr(f, i)?.int().at(i.span)?;
        let element = |len: usize| usize::try_from(index).ok().filter(|&i| i < len);
        let out_of_range = |len: usize| RefError::new(span, ErrorKind::IndexOutOfRange { index, len });
        match obj {
            Val::Seq(items) => match element(items.len()) {
                Some(i) => Ok(items[i].clone()),
                None => Err(out_of_range(items.len())),
            },
            Val::Tensor(t) => Ok(Val::Tensor(self.tape.index(t, index).at(span)?)),
            Val::Instance(Bound::Array(elems)) => match element(elems.len()) {
                Some(i) => Ok(Val::Instance(&elems[i])),
                None => Err(out_of_range(elems.len())),
            },
            other => type_error(span, "a sequence, tensor or parameter array", &other),
        }
    }

    fn binary(&mut self, f: &mut Frame<'r>, op: BinOp, a: &'r Expr, b: &'r Expr, span: Span) -> R<Val<'r>> {
        // `&&` and `||` short-circuit, so `i < len(xs) && xs[i] == 0` never indexes out of
        // range.
        if matches!(op, BinOp::And | BinOp::Or) {
            let x = self.expr(f, a)?.bool().at(a.span)?;
            if x == (op == BinOp::Or) {
                return Ok(Val::Bool(x));
            }
            return Ok(Val::Bool(self.expr(f, b)?.bool().at(b.span)?));
        }
        let x = self.expr(f, a)?;
        let y = self.expr(f, b)?;
        match (x, y) {
            (Val::Tensor(p), Val::Tensor(q)) => {
                let func = match op {
                    BinOp::Add => BinaryFn::Add,
                    BinOp::Sub => BinaryFn::Sub,
                    BinOp::Mul => BinaryFn::Mul,
                    BinOp::Div => BinaryFn::Div,
                    _ => return Err(unevaluable(span, &format!("`{}` on tensors", op.symbol()))),
                };
                Ok(Val::Tensor(self.tape.binary(func, p, q).at(span)?))
            }
            (Val::Int(p), Val::Int(q)) => int_op(op, p, q).at(span),
            (Val::Bool(p), Val::Bool(q)) => match op {
                BinOp::Eq => Ok(Val::Bool(p == q)),
                BinOp::Ne => Ok(Val::Bool(p != q)),
                _ => Err(unevaluable(span, &format!("`{}` on bools", op.symbol()))),
            },
            (x, _) => type_error(span, "two tensors, two ints or two bools", &x),
        }
    }

    fn match_arms(&mut self, f: &mut Frame<'r>, scrutinee: &'r Expr, arms: &'r [MatchArm], span: Span) -> R<Val<'r>> {
        let value = self.expr(f, scrutinee)?;
        let Val::Variant(tag, fields) = &value else {
            return type_error(scrutinee.span, "an enum value", &value);
        };
        for arm in arms {
            match arm.variant {
                Some(v) if v == *tag => {
                    for (field, pattern) in &arm.bindings {
                        let Some(fv) = fields.get(*field as usize) else {
                            return Err(unevaluable(arm.span, "a field the variant does not have"));
                        };
                        bind(f, pattern, fv.clone(), arm.span)?;
                    }
                    return self.expr(f, &arm.body);
                }
                Some(_) => {}
                None => {
                    // A catch-all arm `name => ...` binds the whole value; the typed arm does
                    // not record that local, but it is the one declared where the arm starts.
                    let catch_all = f
                        .def
                        .locals
                        .iter()
                        .position(|l| l.span.file == arm.span.file && l.span.start == arm.span.start);
                    if let Some(id) = catch_all {
                        f.set(amp_sema::LocalId(id as u32), value.clone(), arm.span)?;
                    }
                    return self.expr(f, &arm.body);
                }
            }
        }
        Err(unevaluable(span, &format!("a `match` with no arm for variant #{tag}")))
    }
}

fn param<'r>(f: &Frame<'r>, p: u32, span: Span) -> R<Val<'r>> {
    match f.ctx.params.get(p as usize) {
        Some(bound) => Ok(Val::Instance(bound)),
        None => Err(unevaluable(span, "a parameter the component does not have")),
    }
}

fn type_error<T>(span: Span, expected: &'static str, found: &Val<'_>) -> R<T> {
    Err(RefError::new(span, ErrorKind::Type { expected, found: found.kind_name() }))
}

/// `lo..hi` as a sequence of ints (empty when `hi <= lo`).
pub(super) fn int_range<'r>(lo: i64, hi: i64) -> Result<Val<'r>, ErrorKind> {
    check_range_len(lo, hi)?;
    let items: Vec<Val<'r>> = (lo..hi).map(Val::Int).collect();
    Ok(Val::Seq(Rc::from(items)))
}

/// Integer arithmetic (checked: overflow and division by zero are errors; `/` and `%`
/// truncate toward zero) and comparisons.
fn int_op<'r>(op: BinOp, x: i64, y: i64) -> Result<Val<'r>, ErrorKind> {
    let arith = |v: Option<i64>| v.map(Val::Int).ok_or(ErrorKind::Overflow);
    match op {
        BinOp::Add => arith(x.checked_add(y)),
        BinOp::Sub => arith(x.checked_sub(y)),
        BinOp::Mul => arith(x.checked_mul(y)),
        BinOp::Div | BinOp::Rem if y == 0 => Err(ErrorKind::DivisionByZero),
        BinOp::Div => arith(x.checked_div(y)),
        BinOp::Rem => arith(x.checked_rem(y)),
        BinOp::Eq => Ok(Val::Bool(x == y)),
        BinOp::Ne => Ok(Val::Bool(x != y)),
        BinOp::Lt => Ok(Val::Bool(x < y)),
        BinOp::Le => Ok(Val::Bool(x <= y)),
        BinOp::Gt => Ok(Val::Bool(x > y)),
        BinOp::Ge => Ok(Val::Bool(x >= y)),
        BinOp::And | BinOp::Or => Err(ErrorKind::Type { expected: "two bools", found: "two ints" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: Result<Val<'_>, ErrorKind>) -> Result<i64, ErrorKind> {
        v.and_then(|v| v.int())
    }

    #[test]
    fn int_arithmetic_truncates_and_checks() {
        assert_eq!(int(int_op(BinOp::Div, -7, 2)), Ok(-3));
        assert_eq!(int(int_op(BinOp::Rem, -7, 2)), Ok(-1));
        assert_eq!(int(int_op(BinOp::Div, 7, 0)), Err(ErrorKind::DivisionByZero));
        assert_eq!(int(int_op(BinOp::Rem, 7, 0)), Err(ErrorKind::DivisionByZero));
        assert_eq!(int(int_op(BinOp::Div, i64::MIN, -1)), Err(ErrorKind::Overflow));
        assert_eq!(int(int_op(BinOp::Add, i64::MAX, 1)), Err(ErrorKind::Overflow));
        assert_eq!(int(int_op(BinOp::Mul, i64::MAX, 2)), Err(ErrorKind::Overflow));
        assert!(matches!(int_op(BinOp::Le, 3, 3), Ok(Val::Bool(true))));
    }

    #[test]
    fn ranges_are_empty_backwards_and_bounded() {
        assert!(matches!(int_range(3, 1), Ok(Val::Seq(items)) if items.is_empty()));
        assert!(matches!(int_range(-2, 1), Ok(Val::Seq(items)) if items.len() == 3));
        assert!(matches!(int_range(i64::MIN, i64::MAX), Err(ErrorKind::TooLarge { .. })));
    }
}
