//! The type and shape rule of every built-in function.

use crate::body::BodyChecker;
use crate::shape::{shape_with_values, Dim, Poly};
use crate::typed::{Builtin, Expr, ExprKind, Ty};
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast;

fn mk(kind: ExprKind, ty: Ty, span: Span) -> Expr {
    Expr { kind, ty, span }
}

/// The number of arguments each built-in takes: (min, max).
fn arity(b: Builtin) -> (usize, usize) {
    match b {
        Builtin::Concat => (1, usize::MAX),
        Builtin::Zeros | Builtin::Ones => (0, 8),
        Builtin::Split
        | Builtin::TopK
        | Builtin::CrossEntropy
        | Builtin::Mse
        | Builtin::Zip
        | Builtin::Dot
        | Builtin::Dropout => (2, 2),
        Builtin::ScatterSum => (3, 3),
        _ => (1, 1),
    }
}

impl Builtin {
    /// The parameters and shape rule, as the checker's notes show them:
    /// `(a: f32[n], b: f32[m], ...) -> f32[n + m + ...]`. Overloads are joined by `  or  `.
    pub fn signature(self) -> &'static str {
        signature(self)
    }
}

fn signature(b: Builtin) -> &'static str {
    match b {
        _ if b.is_softmax() => "(v: f32[n, ...]) -> f32[n, ...]  or  (xs: [f32]) -> [f32]",
        _ if b.is_rowwise() => "(v: f32[n, ...]) -> f32[n, ...]",
        Builtin::Unary(_) => "(x: f32[...]) -> f32[...]",
        Builtin::Dropout => "(x: f32[...], p: a constant in [0, 1)) -> f32[...]",
        Builtin::Concat => "(a: f32[n], b: f32[m], ...) -> f32[n + m + ...]",
        Builtin::Split => "(v: f32[n], parts) -> (f32[n / parts], ...)",
        Builtin::Zeros | Builtin::Ones => "(dims...) -> f32[dims...]",
        Builtin::TopK => "(v: f32[n], k) -> ([int], f32[k])",
        Builtin::Argmax => "(v: f32[n]) -> int",
        Builtin::Sum | Builtin::Mean => "(xs: [f32[...]]) -> f32[...]  or  (v: f32[...]) -> f32",
        Builtin::CrossEntropy => "(logits: f32[c], label: int) -> f32",
        Builtin::Mse => "(a: f32[...], b: f32[...]) -> f32",
        Builtin::Dot => "(a: f32[n], b: f32[n]) -> f32",
        Builtin::Len => "(xs: [T]) -> int",
        Builtin::Zip => "(a: [A], b: [B]) -> [(A, B)]",
        Builtin::Range => "(n: int) -> [int]",
        Builtin::ScatterSum => "(values: [f32[...]], index: [int], n: int) -> [f32[...]]",
    }
}

/// The rate of a `dropout`: a constant expression of float literals and ints (literals,
/// hyperparameters, constants; an int-only part is evaluated as ints are, so `drop / 100`
/// truncates where `drop / 100.0` does not), whose value must be known where the call is
/// checked (not in a layer whose hyperparameters it reads) and in `[0, 1)`. `None` after
/// reporting why not.
fn dropout_rate(fc: &mut dyn BodyChecker, e: &ast::Expr) -> Option<f64> {
    fn has_float(e: &ast::Expr) -> bool {
        match &e.kind {
            ast::ExprKind::Float(_) => true,
            ast::ExprKind::Paren(x) | ast::ExprKind::Unary(_, x) => has_float(x),
            ast::ExprKind::Binary(_, a, b) => has_float(a) || has_float(b),
            _ => false,
        }
    }
    // Literals, names, parentheses and arithmetic: what a constant can be written with.
    fn constant_form(e: &ast::Expr) -> bool {
        match &e.kind {
            ast::ExprKind::Float(_) | ast::ExprKind::Int(_) | ast::ExprKind::Name(_) => true,
            ast::ExprKind::Paren(x) | ast::ExprKind::Unary(ast::UnOp::Neg, x) => constant_form(x),
            ast::ExprKind::Binary(_, a, b) => constant_form(a) && constant_form(b),
            _ => false,
        }
    }
    fn eval(fc: &mut dyn BodyChecker, e: &ast::Expr) -> Option<f64> {
        if constant_form(e) && !has_float(e) {
            let dim = fc.const_dim(e)?;
            return match dim.value {
                Some(v) => Some(v as f64),
                None => {
                    fc.error(
                        Diagnostic::new(Code::DropoutRate, e.span, "the dropout rate must be known here")
                            .with_primary(format!("`{dim}` has no value until the layer is instantiated"))
                            .with_help("write the rate as a literal, or apply dropout in the model"),
                    );
                    None
                }
            };
        }
        match &e.kind {
            ast::ExprKind::Float(v) => Some(*v),
            ast::ExprKind::Paren(x) => eval(fc, x),
            ast::ExprKind::Unary(ast::UnOp::Neg, x) => eval(fc, x).map(|v| -v),
            ast::ExprKind::Binary(
                op @ (ast::BinOp::Add | ast::BinOp::Sub | ast::BinOp::Mul | ast::BinOp::Div),
                a,
                b,
            ) => {
                let (a, b) = (eval(fc, a)?, eval(fc, b)?);
                Some(match op {
                    ast::BinOp::Add => a + b,
                    ast::BinOp::Sub => a - b,
                    ast::BinOp::Mul => a * b,
                    _ => a / b,
                })
            }
            _ => {
                fc.error(
                    Diagnostic::new(Code::DropoutRate, e.span, "the dropout rate is not a constant")
                        .with_primary("not a constant expression")
                        .with_note(format!("`dropout{}`", signature(Builtin::Dropout)))
                        .with_help(
                            "write a number such as `0.5`, or an expression of constants such as `drop / 100.0`",
                        ),
                );
                None
            }
        }
    }
    let p = eval(fc, e)?;
    if !(0.0..1.0).contains(&p) || !amp_ir::dropout::valid_rate(p as f32) {
        fc.error(
            Diagnostic::new(Code::DropoutRate, e.span, format!("the dropout rate {p} is outside [0, 1)"))
                .with_primary("not in [0, 1)")
                .with_note("`dropout(x, p)` zeroes each unit with probability p and scales the rest by 1 / (1 - p)"),
        );
        return None;
    }
    Some(p)
}

pub(crate) fn check_builtin(
    fc: &mut dyn BodyChecker,
    b: Builtin,
    args: &[ast::Expr],
    span: Span,
    expected: Option<&Ty>,
) -> Expr {
    let (min, max) = arity(b);
    if args.len() < min || args.len() > max {
        let count = if min == max {
            format!("{min}")
        } else if max == usize::MAX {
            format!("at least {min}")
        } else {
            format!("{min} to {max}")
        };
        fc.error(
            Diagnostic::new(
                Code::ArityMismatch,
                span,
                format!(
                    "`{}` takes {count} argument{}, {} given",
                    b.name(),
                    if count == "1" { "" } else { "s" },
                    args.len()
                ),
            )
            .with_primary("wrong number of arguments")
            .with_note(format!("`{}{}`", b.name(), signature(b))),
        );
        for a in args {
            fc.check(a, None);
        }
        return mk(ExprKind::Error, Ty::Error, span);
    }
    let ty_str = |fc: &dyn BodyChecker, t: &Ty| fc.ty_str(t);
    let wrong = |fc: &mut dyn BodyChecker, code: Code, e: &Expr, what: &str| {
        let shown = ty_str(fc, &e.ty);
        fc.error(
            Diagnostic::new(code, e.span, format!("`{}` {what}, found `{shown}`", b.name()))
                .with_primary(format!("this is `{shown}`"))
                .with_note(format!("`{}{}`", b.name(), signature(b))),
        );
        Ty::Error
    };
    let result = |kind_args: Vec<Expr>, ty: Ty| mk(ExprKind::Builtin(b, kind_args), ty, span);

    match b {
        _ if b.is_elementwise() => {
            let x = fc.check(&args[0], None);
            let ty = match &x.ty {
                Ty::Tensor(_) | Ty::Error => x.ty.clone(),
                _ => wrong(fc, Code::TypeMismatch, &x, "needs an f32 tensor"),
            };
            result(vec![x], ty)
        }
        _ if b.is_rowwise() || b == Builtin::Argmax => {
            let x = fc.check(&args[0], None);
            let ty = match &x.ty {
                // Across the elements of a sequence of scalars (attention weights).
                Ty::Seq(inner) if b.is_softmax() && matches!(&**inner, Ty::Tensor(s) if s.is_empty()) => x.ty.clone(),
                Ty::Tensor(s) if !s.is_empty() => {
                    if b == Builtin::Argmax {
                        Ty::Int
                    } else {
                        x.ty.clone()
                    }
                }
                Ty::Tensor(_) => wrong(fc, Code::RankMismatch, &x, "needs a tensor of rank 1 or more"),
                Ty::Error => {
                    if b == Builtin::Argmax {
                        Ty::Int
                    } else {
                        Ty::Error
                    }
                }
                _ if b.is_softmax() => {
                    wrong(fc, Code::TypeMismatch, &x, "needs an f32 tensor or a sequence of scalars `[f32]`")
                }
                _ => wrong(fc, Code::TypeMismatch, &x, "needs an f32 tensor"),
            };
            result(vec![x], ty)
        }
        Builtin::Dropout => {
            let x = fc.check(&args[0], None);
            let ty = match &x.ty {
                Ty::Tensor(_) | Ty::Error => x.ty.clone(),
                _ => wrong(fc, Code::TypeMismatch, &x, "needs an f32 tensor"),
            };
            // The rate becomes a float literal: lowering and the reference read it as such.
            let Some(p) = dropout_rate(fc, &args[1]) else {
                return result(vec![x], Ty::Error);
            };
            result(vec![x, mk(ExprKind::Float(p), Ty::scalar(), args[1].span)], ty)
        }
        Builtin::Concat => {
            let xs: Vec<Expr> = args.iter().map(|a| fc.check(a, None)).collect();
            let mut total = Some(Dim::constant(0));
            for x in &xs {
                match &x.ty {
                    Ty::Tensor(s) if s.len() == 1 => total = total.map(|t| t.add(&s[0])),
                    Ty::Error => total = None,
                    _ => {
                        wrong(fc, Code::ConcatOperand, x, "joins vectors (rank-1 tensors)");
                        total = None;
                    }
                }
            }
            let ty = total.map_or(Ty::Error, |t| Ty::Tensor(vec![t]));
            result(xs, ty)
        }
        Builtin::Split => {
            let v = fc.check(&args[0], None);
            let Some(parts) = fc.const_dim(&args[1]) else {
                return result(vec![v], Ty::Error);
            };
            let parts_expr = mk(ExprKind::Hyper(parts.clone()), Ty::Int, args[1].span);
            let ty = match (&v.ty, parts.value) {
                (Ty::Error, _) => Ty::Error,
                (_, Some(n)) if !(1..=4096).contains(&n) => {
                    fc.error(
                        Diagnostic::new(Code::SplitNotDivisible, args[1].span, format!("`split` into {n} parts"))
                            .with_primary("the number of parts must be between 1 and 4096"),
                    );
                    Ty::Error
                }
                (Ty::Tensor(s), Some(n)) if s.len() == 1 => match divide(&s[0], n) {
                    Some(part) => Ty::Tuple(vec![Ty::Tensor(vec![part]); n as usize]),
                    None => {
                        let shown = shape_with_values(s);
                        fc.error(
                            Diagnostic::new(
                                Code::SplitNotDivisible,
                                span,
                                format!("`split` cannot cut `{shown}` into {n} equal parts"),
                            )
                            .with_primary(format!("{} is not a multiple of {n}", s[0]))
                            .with_label(v.span, format!("this is `{shown}`")),
                        );
                        Ty::Error
                    }
                },
                (Ty::Tensor(s), Some(_)) if s.len() != 1 => {
                    wrong(fc, Code::RankMismatch, &v, "splits a vector (rank-1 tensor)")
                }
                (Ty::Tensor(_), None) => {
                    fc.error(
                        Diagnostic::new(
                            Code::NotConstant,
                            args[1].span,
                            "the number of parts of `split` must be known",
                        )
                        .with_primary("not a known constant"),
                    );
                    Ty::Error
                }
                _ => wrong(fc, Code::TypeMismatch, &v, "splits an f32 vector"),
            };
            result(vec![v, parts_expr], ty)
        }
        Builtin::Zeros | Builtin::Ones => {
            if args.is_empty() {
                return match expected {
                    Some(t @ Ty::Tensor(_)) => result(Vec::new(), t.clone()),
                    Some(Ty::Error) => result(Vec::new(), Ty::Error),
                    _ => {
                        fc.error(
                            Diagnostic::new(
                                Code::CannotInferShape,
                                span,
                                format!("cannot infer the shape of `{}()`", b.name()),
                            )
                            .with_primary("shape unknown here")
                            .with_help(format!(
                                "annotate the binding (`var h: f32[hidden] = {}();`) or give dims: `{}(hidden)`",
                                b.name(),
                                b.name()
                            )),
                        );
                        result(Vec::new(), Ty::Error)
                    }
                };
            }
            let mut shape = Vec::new();
            let mut dims = Vec::new();
            for a in args {
                let Some(d) = fc.const_dim(a) else {
                    return result(dims, Ty::Error);
                };
                if !fc.check_positive(&d, a.span, "tensor dimension") {
                    return result(dims, Ty::Error);
                }
                dims.push(mk(ExprKind::Hyper(d.clone()), Ty::Int, a.span));
                shape.push(d);
            }
            result(dims, Ty::Tensor(shape))
        }
        Builtin::TopK => {
            let v = fc.check(&args[0], None);
            let Some(k) = fc.const_dim(&args[1]) else {
                return result(vec![v], Ty::Error);
            };
            let k_expr = mk(ExprKind::Hyper(k.clone()), Ty::Int, args[1].span);
            let ty = match &v.ty {
                Ty::Error => Ty::Error,
                Ty::Tensor(s) if s.len() == 1 => {
                    let too_big = matches!((k.value, s[0].value), (Some(k), Some(n)) if k > n);
                    if matches!(k.value, Some(k) if k < 1) {
                        fc.error(
                            Diagnostic::new(
                                Code::TopKOutOfRange,
                                args[1].span,
                                format!("`top_k` with k = {}", k.value.unwrap_or(0)),
                            )
                            .with_primary("k must be at least 1"),
                        );
                        Ty::Error
                    } else if too_big {
                        let shown = shape_with_values(s);
                        fc.error(
                            Diagnostic::new(
                                Code::TopKOutOfRange,
                                args[1].span,
                                format!(
                                    "`top_k` asks for {} of the {} elements of `{shown}`",
                                    k.value.unwrap_or(0),
                                    s[0].value.unwrap_or(0)
                                ),
                            )
                            .with_primary(format!("k = {k} = {}", k.value.unwrap_or(0)))
                            .with_label(v.span, format!("this is `{shown}`")),
                        );
                        Ty::Error
                    } else {
                        Ty::Tuple(vec![Ty::Seq(Box::new(Ty::Int)), Ty::Tensor(vec![k.clone()])])
                    }
                }
                Ty::Tensor(_) => wrong(fc, Code::RankMismatch, &v, "selects from a vector (rank-1 tensor)"),
                _ => wrong(fc, Code::TypeMismatch, &v, "selects from an f32 vector"),
            };
            result(vec![v, k_expr], ty)
        }
        Builtin::Sum | Builtin::Mean => {
            let x = fc.check(&args[0], None);
            let ty = match &x.ty {
                Ty::Error => Ty::Error,
                Ty::Seq(e) => match &**e {
                    Ty::Tensor(_) => (**e).clone(),
                    Ty::Int if b == Builtin::Sum => Ty::Int,
                    Ty::Error => Ty::Error,
                    _ => wrong(fc, Code::CollectionOperand, &x, "reduces a sequence of tensors"),
                },
                Ty::Tensor(_) => Ty::scalar(),
                _ => wrong(fc, Code::CollectionOperand, &x, "reduces a tensor or a sequence of tensors"),
            };
            result(vec![x], ty)
        }
        Builtin::CrossEntropy => {
            let logits = fc.check(&args[0], None);
            let label = fc.check(&args[1], Some(&Ty::Int));
            match &logits.ty {
                Ty::Tensor(s) if s.len() == 1 => {}
                Ty::Error => {}
                _ => {
                    wrong(fc, Code::LossOperands, &logits, "takes logits as a vector `f32[classes]`");
                }
            }
            if !label.ty.fits(&Ty::Int) {
                wrong(fc, Code::LossOperands, &label, "takes the class label as an `int`");
            }
            result(vec![logits, label], Ty::scalar())
        }
        Builtin::Mse => {
            let a = fc.check(&args[0], None);
            let bx = fc.check(&args[1], Some(&a.ty));
            match (&a.ty, &bx.ty) {
                (Ty::Tensor(s), Ty::Tensor(t)) if s == t => {}
                (Ty::Error, _) | (_, Ty::Error) => {}
                (Ty::Tensor(_), Ty::Tensor(_)) => {
                    let (sa, sb) = (ty_str(fc, &a.ty), ty_str(fc, &bx.ty));
                    fc.error(
                        Diagnostic::new(
                            Code::LossOperands,
                            span,
                            format!("`mse` compares equal shapes: `{sa}` vs `{sb}`"),
                        )
                        .with_primary("shapes differ")
                        .with_label(a.span, format!("this is `{sa}`"))
                        .with_label(bx.span, format!("this is `{sb}`")),
                    );
                }
                (Ty::Tensor(_), _) => {
                    wrong(fc, Code::LossOperands, &bx, "compares two f32 tensors");
                }
                _ => {
                    wrong(fc, Code::LossOperands, &a, "compares two f32 tensors");
                }
            }
            result(vec![a, bx], Ty::scalar())
        }
        Builtin::Dot => {
            let a = fc.check(&args[0], None);
            let bx = fc.check(&args[1], Some(&a.ty));
            match (&a.ty, &bx.ty) {
                (Ty::Error, _) | (_, Ty::Error) => {}
                (Ty::Tensor(s), Ty::Tensor(t)) if s.len() == 1 && s == t => {}
                (Ty::Tensor(s), Ty::Tensor(t)) if s.len() == 1 && t.len() == 1 => {
                    let (sa, sb) = (ty_str(fc, &a.ty), ty_str(fc, &bx.ty));
                    fc.error(
                        Diagnostic::new(
                            Code::ShapeMismatch,
                            span,
                            format!("`dot` multiplies vectors of one length: `{sa}` vs `{sb}`"),
                        )
                        .with_primary("lengths differ")
                        .with_label(a.span, format!("this is `{sa}`"))
                        .with_label(bx.span, format!("this is `{sb}`"))
                        .with_note(format!("`dot{}`", signature(b))),
                    );
                }
                (Ty::Tensor(s), _) if s.len() != 1 => {
                    wrong(fc, Code::RankMismatch, &a, "takes vectors (rank-1 tensors)");
                }
                (_, Ty::Tensor(t)) if t.len() != 1 => {
                    wrong(fc, Code::RankMismatch, &bx, "takes vectors (rank-1 tensors)");
                }
                (Ty::Tensor(_), _) => {
                    wrong(fc, Code::TypeMismatch, &bx, "takes two f32 vectors");
                }
                _ => {
                    wrong(fc, Code::TypeMismatch, &a, "takes two f32 vectors");
                }
            }
            result(vec![a, bx], Ty::scalar())
        }
        Builtin::Len => {
            let x = fc.check(&args[0], None);
            if !matches!(x.ty, Ty::Seq(_) | Ty::Error) {
                wrong(fc, Code::CollectionOperand, &x, "counts the elements of a sequence");
            }
            result(vec![x], Ty::Int)
        }
        Builtin::Zip => {
            let a = fc.check(&args[0], None);
            let c = fc.check(&args[1], None);
            let ty = match (&a.ty, &c.ty) {
                (Ty::Seq(x), Ty::Seq(y)) => Ty::Seq(Box::new(Ty::Tuple(vec![(**x).clone(), (**y).clone()]))),
                (Ty::Error, _) | (_, Ty::Error) => Ty::Error,
                (Ty::Seq(_), _) => wrong(fc, Code::CollectionOperand, &c, "pairs two sequences"),
                _ => wrong(fc, Code::CollectionOperand, &a, "pairs two sequences"),
            };
            result(vec![a, c], ty)
        }
        Builtin::Range => {
            let n = fc.check(&args[0], Some(&Ty::Int));
            if !n.ty.fits(&Ty::Int) {
                wrong(fc, Code::TypeMismatch, &n, "counts up to an `int`");
            }
            result(vec![n], Ty::Seq(Box::new(Ty::Int)))
        }
        Builtin::ScatterSum => {
            let values = fc.check(&args[0], None);
            let index = fc.check(&args[1], Some(&Ty::Seq(Box::new(Ty::Int))));
            let n = fc.check(&args[2], Some(&Ty::Int));
            let ty = match &values.ty {
                Ty::Seq(e) if matches!(**e, Ty::Tensor(_)) => Ty::Seq(e.clone()),
                Ty::Error => Ty::Error,
                _ => wrong(fc, Code::CollectionOperand, &values, "adds up a sequence of tensors"),
            };
            if !index.ty.fits(&Ty::Seq(Box::new(Ty::Int))) {
                wrong(fc, Code::CollectionOperand, &index, "takes the destination of each value as `[int]`");
            }
            if !n.ty.fits(&Ty::Int) {
                wrong(fc, Code::CollectionOperand, &n, "takes the number of destinations as an `int`");
            }
            result(vec![values, index, n], ty)
        }
        _ => result(Vec::new(), Ty::Error),
    }
}

/// `d / n` when it is exact: by value when known, else coefficient by coefficient.
fn divide(d: &Dim, n: i64) -> Option<Dim> {
    if n == 0 {
        return None;
    }
    match d.value {
        Some(v) => {
            if v % n != 0 {
                return None;
            }
            // Keep the symbolic form when it divides too: `3 * hidden / 3` is `hidden`.
            let poly = divide_poly(&d.poly, n).unwrap_or_else(|| Poly::constant(v / n));
            Some(Dim { poly, value: Some(v / n) })
        }
        None => divide_poly(&d.poly, n).map(|poly| Dim { value: poly.as_constant(), poly }),
    }
}

fn divide_poly(p: &Poly, n: i64) -> Option<Poly> {
    let mut ok = true;
    let mut result = Poly::default();
    for (mono, coeff) in poly_terms(p) {
        if coeff % n != 0 {
            ok = false;
            break;
        }
        let mut term = Poly::constant(coeff / n);
        for s in mono {
            term = term.mul(&Poly::symbol(s));
        }
        result = result.add(&term);
    }
    ok.then_some(result)
}

fn poly_terms(p: &Poly) -> Vec<(Vec<crate::shape::Symbol>, i64)> {
    p.terms().map(|(m, c)| (m.clone(), c)).collect()
}
