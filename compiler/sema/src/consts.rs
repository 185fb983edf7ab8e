//! Compile-time integer expressions: hyperparameter defaults, `const` values, tensor
//! dimensions and the constant arguments of built-ins (`split(v, 3)`, `top_k(v, k)`).

use crate::shape::{divide_dims, Dim};
use amp_diagnostics::{Code, Diagnostic};
use amp_grammar::ast::{BinOp, Expr, ExprKind, Ident, UnOp};

/// Where constant expressions find their names.
pub(crate) trait DimScope {
    /// The dimension a name stands for, or the diagnostic explaining why it cannot.
    fn lookup_dim(&mut self, name: &Ident) -> Result<Dim, Box<Diagnostic>>;
}

pub(crate) fn eval_dim(expr: &Expr, scope: &mut dyn DimScope) -> Result<Dim, Box<Diagnostic>> {
    match &expr.kind {
        ExprKind::Int(v) => Ok(Dim::constant(*v)),
        ExprKind::Paren(inner) => eval_dim(inner, scope),
        ExprKind::Name(name) => scope.lookup_dim(name),
        ExprKind::Unary(UnOp::Neg, inner) => Ok(Dim::constant(0).sub(&eval_dim(inner, scope)?)),
        ExprKind::Binary(op, a, b) => {
            let x = eval_dim(a, scope)?;
            let y = eval_dim(b, scope)?;
            let result = match op {
                BinOp::Add => x.add(&y),
                BinOp::Sub => x.sub(&y),
                BinOp::Mul => x.mul(&y),
                BinOp::Div | BinOp::Rem => {
                    if y.value == Some(0) {
                        return Err(Box::new(
                            Diagnostic::new(Code::ConstEvalError, b.span, "division by zero in a constant expression")
                                .with_primary("this is zero"),
                        ));
                    }
                    divide_dims(if *op == BinOp::Div { '/' } else { '%' }, &x, &y)
                }
                _ => {
                    return Err(Box::new(
                        Diagnostic::new(
                            Code::NotConstant,
                            expr.span,
                            format!("`{}` is not allowed in a constant expression", op.symbol()),
                        )
                        .with_primary("not an integer operation")
                        .with_note("dimensions and hyperparameters are built from integers with `+ - * / %`"),
                    ))
                }
            };
            // Known operands whose result lost its value overflowed.
            if x.value.is_some() && y.value.is_some() && result.value.is_none() {
                return Err(Box::new(
                    Diagnostic::new(Code::ConstEvalError, expr.span, "constant arithmetic overflows")
                        .with_primary("this overflows a 64-bit integer"),
                ));
            }
            Ok(result)
        }
        // Already reported by the parser: an empty message is dropped by the checker.
        ExprKind::Error => Err(Box::new(Diagnostic::new(Code::NotConstant, expr.span, ""))),
        _ => Err(Box::new(
            Diagnostic::new(Code::NotConstant, expr.span, "expression is not a compile-time constant")
                .with_primary("not known at compile time")
                .with_note(
                    "dimensions, hyperparameter defaults and constants are integer expressions over hyperparameters and `const`s",
                ),
        )),
    }
}

/// An empty message marks "already reported by the parser": callers drop it.
pub(crate) fn is_silent(diag: &Diagnostic) -> bool {
    diag.message.is_empty()
}
