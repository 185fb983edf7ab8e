//! Expressions: names, operators, fields, indexing, `if`.

use crate::collect::{const_hover, hyper_hover, suggest, Checker, Global};
use crate::typed::*;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self, BinOp, UnOp};

use super::{branch_value_span, err_expr, mk, FnChecker};

impl FnChecker<'_, '_> {
    // ------------------------------------------------------------ expressions

    pub(super) fn check_expr(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Expr {
        let out = self.check_expr_inner(e, expected);
        if !matches!(out.kind, ExprKind::Error) {
            let shown = self.ck.ty_str(&out.ty);
            self.ck.program.expr_types.push((out.span, shown));
        }
        out
    }

    pub(super) fn check_expr_inner(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Expr {
        let span = e.span;
        match &e.kind {
            ast::ExprKind::Int(v) => mk(ExprKind::Int(*v), Ty::Int, span),
            ast::ExprKind::Float(v) => mk(ExprKind::Float(*v), Ty::scalar(), span),
            ast::ExprKind::Bool(v) => mk(ExprKind::Bool(*v), Ty::Bool, span),
            ast::ExprKind::Str(_) => {
                self.ck.error(
                    Diagnostic::new(Code::StringNotAValue, span, "string literals are not values in Amp")
                        .with_primary("a string")
                        .with_note("models compute on ints, bools and f32 tensors; text enters through the data loader's vocabulary"),
                );
                err_expr(span)
            }
            ast::ExprKind::Name(name) => self.check_name(name, span),
            ast::ExprKind::Paren(inner) => {
                let inner = self.check_expr(inner, expected);
                Expr { span, ..inner }
            }
            ast::ExprKind::Unary(op, inner) => self.check_unary(*op, inner, span),
            ast::ExprKind::Binary(op, a, b) => self.check_binary(*op, a, b, span),
            ast::ExprKind::Range(a, b) => {
                let a = self.expect_int(a, "a range bound");
                let b = self.expect_int(b, "a range bound");
                mk(ExprKind::Range(Box::new(a), Box::new(b)), Ty::Seq(Box::new(Ty::Int)), span)
            }
            ast::ExprKind::Call(callee, args) => self.check_call(callee, args, span, expected),
            ast::ExprKind::Field(obj, field) => self.check_field(obj, field, span),
            ast::ExprKind::TupleField(obj, index, index_span) => {
                let obj = self.check_expr(obj, None);
                match &obj.ty {
                    Ty::Tuple(ts) if (*index as usize) < ts.len() => {
                        let ty = ts[*index as usize].clone();
                        mk(ExprKind::TupleField(Box::new(obj), *index), ty, span)
                    }
                    Ty::Error => err_expr(span),
                    other => {
                        let shown = self.ck.ty_str(other);
                        self.ck.error(
                            Diagnostic::new(
                                Code::UnknownField,
                                *index_span,
                                format!("`{shown}` has no element {index}"),
                            )
                            .with_primary("no such element"),
                        );
                        err_expr(span)
                    }
                }
            }
            ast::ExprKind::Index(obj, index) => self.check_index(obj, index, span),
            ast::ExprKind::Tuple(items) => {
                let expected_items = match expected {
                    Some(Ty::Tuple(ts)) if ts.len() == items.len() => Some(ts.clone()),
                    _ => None,
                };
                let items: Vec<Expr> = items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.check_expr(x, expected_items.as_ref().map(|ts| &ts[i])))
                    .collect();
                let ty = Ty::Tuple(items.iter().map(|x| x.ty.clone()).collect());
                mk(ExprKind::Tuple(items), ty, span)
            }
            ast::ExprKind::List(items) => {
                let expected_elem = match expected {
                    Some(Ty::Seq(t)) => Some((**t).clone()),
                    _ => None,
                };
                let mut checked = Vec::new();
                let mut elem: Option<Ty> = expected_elem.clone();
                for x in items {
                    let c = self.check_expr(x, elem.as_ref());
                    match &elem {
                        Some(t) if !c.ty.fits(t) => {
                            let d = self.mismatch(t, &c.ty, c.span, "list elements must have one type");
                            self.ck.error(d);
                        }
                        Some(_) => {}
                        None => elem = Some(c.ty.clone()),
                    }
                    checked.push(c);
                }
                match elem {
                    Some(t) => mk(ExprKind::List(checked), Ty::Seq(Box::new(t)), span),
                    None => {
                        self.ck.error(
                            Diagnostic::new(
                                Code::CannotInferShape,
                                span,
                                "cannot infer the element type of an empty list",
                            )
                            .with_primary("empty list")
                            .with_help("annotate the binding, e.g. `let xs: [int] = [];`"),
                        );
                        err_expr(span)
                    }
                }
            }
            ast::ExprKind::Repeat(..) => {
                self.ck.error(
                    Diagnostic::new(
                        Code::InvalidParam,
                        span,
                        "`[x; n]` declares a parameter array and belongs in a `param`",
                    )
                    .with_primary("not a run-time value")
                    .with_help("declare `param experts = [Mlp(d, d, d); n];`"),
                );
                err_expr(span)
            }
            ast::ExprKind::Closure(..) => {
                self.ck.error(
                    Diagnostic::new(Code::ClosureOutsideMap, span, "closures can only be passed to `.map(...)`")
                        .with_primary("closure here")
                        .with_note("Amp has no function values; a closure is the body of a collection operation"),
                );
                // Its body is still checked: its own mistakes are reported, and what it
                // uses is not reported as unused.
                self.check_discarded(std::slice::from_ref(e));
                err_expr(span)
            }
            ast::ExprKind::If(cond, then, els) => self.check_if(cond, then, els.as_deref(), span, expected),
            ast::ExprKind::Match(scrutinee, arms) => self.check_match(scrutinee, arms, span, expected),
            ast::ExprKind::Block(b) => {
                let block = self.check_block(b, expected);
                let ty = Self::block_ty(&block);
                mk(ExprKind::Block(block), ty, span)
            }
            ast::ExprKind::Error => err_expr(span),
        }
    }

    pub(super) fn unknown_name(&mut self, name: &ast::Ident) {
        let mut candidates: Vec<String> = self.scopes.iter().flatten().map(|(n, _)| n.clone()).collect();
        let info = &self.ck.components[self.comp.0 as usize];
        candidates.extend(info.params.keys().cloned());
        candidates.extend(info.hyperparams.keys().cloned());
        candidates.extend(info.consts.keys().cloned());
        candidates.extend(info.fns.keys().cloned());
        candidates.extend(self.ck.modules[self.module].scope.keys().cloned());
        candidates.extend(Builtin::all().map(|b| b.name().to_string()));
        let mut d = Diagnostic::new(Code::UnknownName, name.span, format!("unknown name `{}`", name.name))
            .with_primary("not found in this scope");
        if let Some(s) = suggest(&name.name, candidates.iter().map(String::as_str)) {
            // The suggested variable or parameter was most likely meant to be used here:
            // count it as used rather than also warn that it is unused.
            if let Some(id) = self.lookup_local(&s) {
                self.used[id.0 as usize] = true;
            } else if let Some(&p) = self.ck.components[self.comp.0 as usize].params.get(&s) {
                self.ck.components[self.comp.0 as usize].params_used[p as usize] = true;
            }
            d = d.with_suggestion(s);
        }
        self.ck.error(d);
    }

    pub(super) fn check_name(&mut self, name: &ast::Ident, span: Span) -> Expr {
        if self.lookup_local(&name.name).is_none()
            && self.ck.components[self.comp.0 as usize].failed_params.contains(&name.name)
        {
            return err_expr(span); // its declaration is already reported
        }
        if let Some(id) = self.lookup_local(&name.name) {
            self.used[id.0 as usize] = true;
            let local = &self.locals[id.0 as usize];
            let (ty, def) = (local.ty.clone(), local.span);
            let hover = format!("{}{}: {}", if local.mutable { "var " } else { "" }, local.name, self.ck.ty_str(&ty));
            self.ck.reference(name.span, def, hover);
            return mk(ExprKind::Local(id), ty, span);
        }
        let info = &self.ck.components[self.comp.0 as usize];
        if let Some(&p) = info.params.get(&name.name) {
            self.ck.components[self.comp.0 as usize].params_used[p as usize] = true;
            let param = &self.component().params[p as usize];
            let (inst, def) = (param.instance.clone(), param.span);
            let hover = format!("param {}: {}", name.name, self.ck.instance_str(&inst));
            self.ck.reference(name.span, def, hover);
            return mk(ExprKind::Param(p), Ty::Instance(inst), span);
        }
        if let Some(&h) = info.hyperparams.get(&name.name) {
            let hp = &self.component().hyperparams[h];
            let dim = crate::shape::Dim::symbol(hp.symbol.clone(), hp.value);
            let (def, hover) = (hp.span, hyper_hover(&hp.name, hp.value));
            self.ck.reference(name.span, def, hover);
            return mk(ExprKind::Hyper(dim), Ty::Int, span);
        }
        if let Some((dim, def)) = info.consts.get(&name.name).cloned() {
            self.ck.reference(name.span, def, const_hover(&name.name, &dim));
            return mk(ExprKind::Hyper(dim), Ty::Int, span);
        }
        if let Some(&f) = info.fns.get(&name.name) {
            let def = self.component().fns[f as usize].span;
            self.ck.error(
                Diagnostic::new(Code::NotCallable, name.span, format!("function `{}` is not a value", name.name))
                    .with_primary("call it instead")
                    .with_label(def, "defined here"),
            );
            return err_expr(span);
        }
        match self.ck.lookup_global(self.module, &name.name) {
            Some((Global::Const(dim, def), _)) => {
                self.ck.reference(name.span, def, const_hover(&name.name, &dim));
                mk(ExprKind::Hyper(dim), Ty::Int, span)
            }
            // Its definition failed and was reported there.
            Some((Global::Failed, _)) => err_expr(span),
            Some((_, def)) => {
                self.ck.error(
                    Diagnostic::new(Code::UnknownName, name.span, format!("`{}` is not a value", name.name))
                        .with_primary("a type or component, not a value")
                        .with_label(def, "defined here"),
                );
                err_expr(span)
            }
            None => {
                if Builtin::from_name(&name.name).is_some()
                    || matches!(name.name.as_str(), "Linear" | "Embedding" | "LayerNorm")
                {
                    self.ck.error(
                        Diagnostic::new(
                            Code::NotCallable,
                            name.span,
                            format!("built-in `{}` must be called", name.name),
                        )
                        .with_primary("not a value"),
                    );
                } else {
                    self.unknown_name(name);
                }
                err_expr(span)
            }
        }
    }

    pub(super) fn expect_int(&mut self, e: &ast::Expr, what: &str) -> Expr {
        let c = self.check_expr(e, Some(&Ty::Int));
        if !c.ty.fits(&Ty::Int) {
            let d = self.mismatch(&Ty::Int, &c.ty, c.span, &format!("{what} must be an `int`"));
            let d = if matches!(c.ty, Ty::Tensor(_)) {
                d.with_help("payload values become ints only through `argmax(v)` or `top_k(v, k)`")
            } else {
                d
            };
            self.ck.error(d);
        }
        c
    }

    /// A condition: a `bool` computed from ints, bools, fields and counters, never from a
    /// payload tensor except through `argmax` / `top_k`.
    pub(super) fn check_condition(&mut self, e: &ast::Expr) -> Expr {
        let c = self.check_expr(e, Some(&Ty::Bool));
        match &c.ty {
            Ty::Bool | Ty::Error => {}
            Ty::Tensor(_) => {
                let shown = self.ck.ty_str(&c.ty);
                self.ck.error(
                    Diagnostic::new(Code::PayloadCondition, c.span, "a payload tensor cannot be a condition")
                        .with_primary(format!("this is `{shown}`"))
                        .with_note("control flow travels in message states; a payload enters it only through an explicit, non-differentiable conversion")
                        .with_help("convert it: `argmax(v) == k`, or route with `top_k(v, k)`"),
                );
            }
            other => {
                let shown = self.ck.ty_str(other);
                self.ck.error(
                    Diagnostic::new(
                        Code::ConditionNotBool,
                        c.span,
                        format!("condition must be a `bool`, found `{shown}`"),
                    )
                    .with_primary(format!("this is `{shown}`")),
                );
            }
        }
        c
    }

    pub(super) fn check_unary(&mut self, op: UnOp, inner: &ast::Expr, span: Span) -> Expr {
        let x = self.check_expr(inner, None);
        let ty = match (op, &x.ty) {
            (_, Ty::Error) => Ty::Error,
            (UnOp::Neg, Ty::Int) => Ty::Int,
            (UnOp::Neg, Ty::Tensor(s)) => Ty::Tensor(s.clone()),
            (UnOp::Not, Ty::Bool) => Ty::Bool,
            (_, other) => {
                let shown = self.ck.ty_str(other);
                let sym = if op == UnOp::Neg { "-" } else { "!" };
                self.ck.error(
                    Diagnostic::new(Code::InvalidOperands, span, format!("`{sym}` cannot be applied to `{shown}`"))
                        .with_primary(format!("operand is `{shown}`")),
                );
                Ty::Error
            }
        };
        mk(ExprKind::Unary(op, Box::new(x)), ty, span)
    }

    pub(super) fn check_binary(&mut self, op: BinOp, a: &ast::Expr, b: &ast::Expr, span: Span) -> Expr {
        let mut x = self.check_expr(a, None);
        let mut y = self.check_expr(b, None);
        // An int literal next to a tensor is an f32 scalar: `2 * x`, `1 - z`.
        let coerce = |e: &mut Expr, other: &Ty| {
            if let (ExprKind::Int(v), Ty::Tensor(_)) = (&e.kind, other) {
                e.kind = ExprKind::Float(*v as f64);
                e.ty = Ty::scalar();
            }
        };
        if !op.is_comparison() {
            let yt = y.ty.clone();
            coerce(&mut x, &yt);
            let xt = x.ty.clone();
            coerce(&mut y, &xt);
        }
        let ty = self.binary_type(op, &x, &y, span);
        mk(ExprKind::Binary(op, Box::new(x), Box::new(y)), ty, span)
    }

    pub(super) fn binary_type(&mut self, op: BinOp, x: &Expr, y: &Expr, span: Span) -> Ty {
        let (xs, ys) = (self.ck.ty_str(&x.ty), self.ck.ty_str(&y.ty));
        let invalid = |ck: &mut Checker, help: Option<&str>| {
            let mut d = Diagnostic::new(
                Code::InvalidOperands,
                span,
                format!("`{}` is not defined for `{xs}` and `{ys}`", op.symbol()),
            )
            .with_primary("invalid operands")
            .with_label(x.span, format!("this is `{xs}`"))
            .with_label(y.span, format!("this is `{ys}`"));
            if let Some(h) = help {
                d = d.with_help(h);
            }
            ck.error(d);
            Ty::Error
        };
        match (&x.ty, &y.ty) {
            (Ty::Error, _) | (_, Ty::Error) => {
                if op.is_comparison() || op.is_logical() {
                    Ty::Bool
                } else {
                    Ty::Error
                }
            }
            _ if op.is_logical() => match (&x.ty, &y.ty) {
                (Ty::Bool, Ty::Bool) => Ty::Bool,
                _ => invalid(self.ck, None),
            },
            _ if op.is_comparison() => match (&x.ty, &y.ty) {
                (Ty::Int, Ty::Int) => Ty::Bool,
                (Ty::Bool, Ty::Bool) if matches!(op, BinOp::Eq | BinOp::Ne) => Ty::Bool,
                (Ty::Tensor(_), _) | (_, Ty::Tensor(_)) => {
                    let payload = if matches!(x.ty, Ty::Tensor(_)) { x } else { y };
                    let shown = self.ck.ty_str(&payload.ty);
                    self.ck.error(
                        Diagnostic::new(Code::PayloadCondition, span, format!("comparison `{}` on a payload value", op.symbol()))
                            .with_primary("this would turn a payload into control flow")
                            .with_label(payload.span, format!("this is `{shown}`"))
                            .with_note("control flow may depend on payloads only through an explicit, non-differentiable conversion")
                            .with_help("compare ints instead: `argmax(v) == k`, or route with `top_k(v, k)`"),
                    );
                    Ty::Bool
                }
                _ => invalid(self.ck, None),
            },
            (Ty::Int, Ty::Int) => Ty::Int,
            (Ty::Tensor(s), Ty::Tensor(t)) => {
                if op == BinOp::Rem {
                    return invalid(self.ck, Some("`%` is defined on ints only"));
                }
                if s == t || t.is_empty() {
                    Ty::Tensor(s.clone())
                } else if s.is_empty() {
                    Ty::Tensor(t.clone())
                } else {
                    self.ck.error(
                        Diagnostic::new(
                            Code::BroadcastMismatch,
                            span,
                            format!("`{}` needs equal shapes or a scalar: `{xs}` vs `{ys}`", op.symbol()),
                        )
                        .with_primary("shapes differ")
                        .with_label(x.span, format!("this is `{xs}`"))
                        .with_label(y.span, format!("this is `{ys}`")),
                    );
                    Ty::Error
                }
            }
            (Ty::Int, Ty::Tensor(_)) | (Ty::Tensor(_), Ty::Int) => invalid(
                self.ck,
                Some("ints are data, not payloads; write a float literal such as `2.0` to scale a tensor"),
            ),
            _ => invalid(self.ck, None),
        }
    }

    pub(super) fn check_field(&mut self, obj: &ast::Expr, field: &ast::Ident, span: Span) -> Expr {
        let obj = self.check_expr(obj, None);
        match &obj.ty {
            Ty::Record(id) => {
                let rec = &self.ck.program.records[id.0 as usize];
                match rec.fields.iter().position(|f| f.name == field.name) {
                    Some(i) => {
                        let f = &rec.fields[i];
                        let (ty, def) = (f.ty.clone(), f.span);
                        let hover = format!("{}.{}: {}", rec.name, f.name, self.ck.ty_str(&ty));
                        self.ck.reference(field.span, def, hover);
                        mk(ExprKind::Field(Box::new(obj), i as u32), ty, span)
                    }
                    None => {
                        let names: Vec<&str> = rec.fields.iter().map(|f| f.name.as_str()).collect();
                        let mut d = Diagnostic::new(
                            Code::UnknownField,
                            field.span,
                            format!("record `{}` has no field `{}`", rec.name, field.name),
                        )
                        .with_primary("unknown field")
                        .with_label(rec.span, format!("`{}` is defined here", rec.name))
                        .with_note(format!("its fields are: {}", names.join(", ")));
                        if let Some(s) = suggest(&field.name, names.iter().copied()) {
                            d = d.with_suggestion(s);
                        }
                        self.ck.error(d);
                        err_expr(span)
                    }
                }
            }
            Ty::Error => err_expr(span),
            other => {
                let shown = self.ck.ty_str(other);
                let mut d =
                    Diagnostic::new(Code::UnknownField, field.span, format!("`{shown}` has no field `{}`", field.name))
                        .with_primary("no such field")
                        .with_label(obj.span, format!("this is `{shown}`"));
                if let Ty::Enum(_) = other {
                    d = d.with_help("take an enum apart with `match`");
                }
                self.ck.error(d);
                err_expr(span)
            }
        }
    }

    pub(super) fn check_index(&mut self, obj: &ast::Expr, index: &ast::Expr, span: Span) -> Expr {
        let obj = self.check_expr(obj, None);
        let idx = self.check_expr(index, Some(&Ty::Int));
        if !idx.ty.fits(&Ty::Int) {
            let shown = self.ck.ty_str(&idx.ty);
            let mut d =
                Diagnostic::new(Code::NotIndexable, idx.span, format!("an index must be an `int`, found `{shown}`"))
                    .with_primary(format!("this is `{shown}`"));
            if matches!(idx.ty, Ty::Tensor(_)) {
                d = d.with_help("payload values become ints only through `argmax(v)` or `top_k(v, k)`");
            }
            self.ck.error(d);
        }
        let ty = match &obj.ty {
            Ty::Seq(t) => (**t).clone(),
            Ty::Tensor(s) if !s.is_empty() => Ty::Tensor(s[1..].to_vec()),
            Ty::Instance(inst) => match &**inst {
                Instance::Array { elem, .. } => Ty::Instance(elem.clone()),
                _ => self.not_indexable(&obj),
            },
            Ty::Error => Ty::Error,
            Ty::Tensor(_) => {
                self.ck.error(
                    Diagnostic::new(Code::RankMismatch, obj.span, "a scalar `f32` cannot be indexed")
                        .with_primary("rank 0"),
                );
                Ty::Error
            }
            _ => self.not_indexable(&obj),
        };
        mk(ExprKind::Index(Box::new(obj), Box::new(idx)), ty, span)
    }

    pub(super) fn not_indexable(&mut self, obj: &Expr) -> Ty {
        let shown = self.ck.ty_str(&obj.ty);
        self.ck.error(
            Diagnostic::new(Code::NotIndexable, obj.span, format!("`{shown}` cannot be indexed"))
                .with_primary(format!("this is `{shown}`"))
                .with_note("sequences, tensors and parameter arrays can be indexed with an `int`"),
        );
        Ty::Error
    }

    pub(super) fn check_if(
        &mut self,
        cond: &ast::Expr,
        then: &ast::Block,
        els: Option<&ast::Expr>,
        span: Span,
        expected: Option<&Ty>,
    ) -> Expr {
        let cond = self.check_condition(cond);
        let then_b = self.check_block(then, expected);
        let then_ty = Self::block_ty(&then_b);
        let Some(els) = els else {
            return mk(ExprKind::If(Box::new(cond), then_b, None), Ty::unit(), span);
        };
        let els_e = self.check_expr(els, expected.or(Some(&then_ty)));
        let ty = if then_ty.fits(&els_e.ty) {
            if then_ty.is_error() {
                els_e.ty.clone()
            } else {
                then_ty.clone()
            }
        } else {
            let (t, e) = (self.ck.ty_str(&then_ty), self.ck.ty_str(&els_e.ty));
            let then_span = then_b.tail.as_ref().map_or(then_b.span, |x| x.span);
            let els_span = branch_value_span(&els_e);
            self.ck.error(
                Diagnostic::new(
                    Code::BranchMismatch,
                    span,
                    format!("`if` and `else` have different types: `{t}` vs `{e}`"),
                )
                .with_primary("branches differ")
                .with_label(then_span, format!("this branch is `{t}`"))
                .with_label(els_span, format!("this branch is `{e}`")),
            );
            Ty::Error
        };
        mk(ExprKind::If(Box::new(cond), then_b, Some(Box::new(els_e))), ty, span)
    }
}
