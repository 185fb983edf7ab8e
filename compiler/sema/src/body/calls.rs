//! Calls: functions of the component (recursion is recorded), built-ins, `map`,
//! and parameter instances (Linear, Embedding, layers and their functions).

use crate::collect::{substitute_ty, Global};
use crate::shape::Symbol;
use crate::typed::*;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self};
use std::sync::Arc;

use super::{err_expr, mk, Call, FnChecker};

impl FnChecker<'_, '_> {
    // ------------------------------------------------------------ calls

    pub(super) fn check_args(
        &mut self,
        args: &[ast::Expr],
        params: &[Ty],
        callee: &str,
        span: Span,
        def: Option<Span>,
    ) -> Vec<Expr> {
        if args.len() != params.len() {
            let mut d = Diagnostic::new(
                Code::ArityMismatch,
                span,
                format!(
                    "`{callee}` takes {} argument{}, {} given",
                    params.len(),
                    if params.len() == 1 { "" } else { "s" },
                    args.len()
                ),
            )
            .with_primary("wrong number of arguments");
            if let Some(def) = def {
                d = d.with_label(def, "defined here");
            }
            self.ck.error(d);
            return args.iter().map(|a| self.check_expr(a, None)).collect();
        }
        let mut out = Vec::new();
        for (a, p) in args.iter().zip(params) {
            let c = self.check_expr(a, Some(p));
            if !c.ty.fits(p) {
                let mut d = self.mismatch(p, &c.ty, c.span, &format!("argument of `{callee}` has the wrong type"));
                if let Some(def) = def {
                    d = d.with_label(def, "defined here");
                }
                self.ck.error(d);
            }
            out.push(c);
        }
        out
    }

    pub(super) fn check_call(
        &mut self,
        callee: &ast::Expr,
        args: &[ast::Expr],
        span: Span,
        expected: Option<&Ty>,
    ) -> Expr {
        if let ast::ExprKind::Name(name) = &callee.kind {
            let is_value = self.lookup_local(&name.name).is_some()
                || self.ck.components[self.comp.0 as usize].params.contains_key(&name.name);
            if !is_value {
                if let Some(&f) = self.ck.components[self.comp.0 as usize].fns.get(&name.name) {
                    return self.call_fn(f, name, args, span);
                }
                if let Some(b) = Builtin::from_name(&name.name) {
                    return crate::builtins::check_builtin(self, b, args, span, expected);
                }
                if matches!(name.name.as_str(), "Linear" | "Embedding" | "LayerNorm")
                    || matches!(
                        self.ck.modules[self.module].scope.get(&name.name),
                        Some((Global::Component(_) | Global::Imported(..), _))
                    )
                {
                    self.ck.error(
                        Diagnostic::new(
                            Code::InvalidParam,
                            span,
                            format!("`{}` creates parameters and must be declared with `param`", name.name),
                        )
                        .with_primary("not callable here")
                        .with_help(format!("declare `param p = {}(...);` and call `p(x)`", name.name)),
                    );
                    self.check_discarded(args);
                    return err_expr(span);
                }
            }
        }
        if let ast::ExprKind::Field(obj, method) = &callee.kind {
            let obj = self.check_expr(obj, None);
            return self.call_method(obj, method, args, span);
        }
        let f = self.check_expr(callee, None);
        match f.ty.clone() {
            Ty::Instance(inst) => self.call_instance(f, &inst, None, args, span),
            Ty::Error => {
                self.check_discarded(args);
                err_expr(span)
            }
            other => {
                let shown = self.ck.ty_str(&other);
                self.ck.error(
                    Diagnostic::new(Code::NotCallable, f.span, format!("`{shown}` is not callable"))
                        .with_primary(format!("this is `{shown}`")),
                );
                self.check_discarded(args);
                err_expr(span)
            }
        }
    }

    pub(super) fn call_fn(&mut self, f: u32, name: &ast::Ident, args: &[ast::Expr], span: Span) -> Expr {
        let def = &self.component().fns[f as usize];
        let params: Vec<Ty> = def.params.iter().map(|p| def.locals[p.0 as usize].ty.clone()).collect();
        let (ret, def_span) = (def.ret.clone(), def.span);
        let sig: Vec<String> = params.iter().map(|t| self.ck.ty_str(t)).collect();
        let hover = format!("fn {}({}) -> {}", name.name, sig.join(", "), self.ck.ty_str(&ret));
        self.ck.reference(name.span, def_span, hover);
        let args = self.check_args(args, &params, &name.name, span, Some(def_span));
        // An argument of unknown type (a mistake already reported) cannot be judged.
        let structural = args.iter().any(|a| self.is_smaller(a) || a.ty.is_error());
        self.calls.push(Call { caller: self.fn_index, callee: f, span, structural });
        mk(ExprKind::CallFn(FnId { component: self.comp, index: f }, args), ret, span)
    }

    pub(super) fn call_method(&mut self, obj: Expr, method: &ast::Ident, args: &[ast::Expr], span: Span) -> Expr {
        match obj.ty.clone() {
            Ty::Seq(elem) if method.name == "map" => self.check_map(obj, &elem, args, span),
            Ty::Instance(inst) if matches!(&*inst, Instance::Layer { .. }) => {
                self.call_instance(obj, &inst, Some(method), args, span)
            }
            Ty::Error => {
                self.check_discarded(args);
                err_expr(span)
            }
            other => {
                let shown = self.ck.ty_str(&other);
                let help = match &other {
                    Ty::Seq(_) => "sequences have the method `map`; `len`, `sum`, `zip` are functions: `len(xs)`",
                    _ => "only sequences (`xs.map(...)`) and layer instances (`cell.leaf(x)`) have methods",
                };
                self.ck.error(
                    Diagnostic::new(
                        Code::UnknownMethod,
                        method.span,
                        format!("`{shown}` has no method `{}`", method.name),
                    )
                    .with_primary("unknown method")
                    .with_help(help),
                );
                self.check_discarded(args);
                err_expr(span)
            }
        }
    }

    pub(super) fn check_map(&mut self, seq: Expr, elem: &Ty, args: &[ast::Expr], span: Span) -> Expr {
        let closure = match args {
            [a] => a,
            _ => {
                self.ck.error(
                    Diagnostic::new(
                        Code::ArityMismatch,
                        span,
                        format!("`map` takes one closure, {} given", args.len()),
                    )
                    .with_primary("expected `xs.map(|x| ...)`"),
                );
                // Still checked, so that what they use is not reported as unused.
                self.check_discarded(args);
                return err_expr(span);
            }
        };
        let ast::ExprKind::Closure(params, body) = &closure.kind else {
            let c = self.check_expr(closure, None);
            if !c.ty.is_error() {
                self.ck.error(
                    Diagnostic::new(Code::TypeMismatch, closure.span, "`map` takes a closure")
                        .with_primary("expected `|x| ...`"),
                );
            }
            return err_expr(span);
        };
        if params.len() != 1 {
            self.ck.error(
                Diagnostic::new(
                    Code::ArityMismatch,
                    closure.span,
                    format!("the closure of `map` takes one parameter, {} given", params.len()),
                )
                .with_primary("expected `|x| ...`")
                .with_help("destructure pairs with `|(a, b)| ...`"),
            );
            self.check_discarded(args);
            return err_expr(span);
        }
        self.push_scope(closure.span);
        let param = self.bind_pattern(&params[0], elem, false);
        // The elements of a part of the input are parts of it too: a recursive call on
        // them (`kids.map(|k| encode(k))`) follows the data.
        if self.is_smaller(&seq) {
            super::collect_binds(&param, &mut self.smaller);
        }
        let body = self.check_expr(body, None);
        self.pop_scope();
        let ty = if body.ty.is_error() { Ty::Error } else { Ty::Seq(Box::new(body.ty.clone())) };
        mk(ExprKind::Map { seq: Box::new(seq), param, body: Box::new(body) }, ty, span)
    }

    /// The declaration site of the param behind an instance expression, for labels.
    pub(super) fn instance_origin(&self, e: &Expr) -> Option<Span> {
        match &e.kind {
            ExprKind::Param(p) => self.component().params.get(*p as usize).map(|p| p.span),
            ExprKind::Index(inner, _) => self.instance_origin(inner),
            _ => None,
        }
    }

    pub(super) fn call_instance(
        &mut self,
        callee: Expr,
        inst: &Arc<Instance>,
        method: Option<&ast::Ident>,
        args: &[ast::Expr],
        span: Span,
    ) -> Expr {
        let origin = self.instance_origin(&callee);
        let inst_str = self.ck.instance_str(inst);
        match &**inst {
            Instance::Linear { input, output } => {
                let [arg] = args else {
                    return self.primitive_arity(&inst_str, args, span);
                };
                let x = self.check_expr(arg, None);
                let ty = match &x.ty {
                    Ty::Tensor(s) if s.last() == Some(input) => {
                        let mut out = s.clone();
                        if let Some(last) = out.last_mut() {
                            *last = output.clone();
                        }
                        Ty::Tensor(out)
                    }
                    Ty::Error => Ty::Error,
                    other => {
                        let expected = crate::shape::shape_with_values(std::slice::from_ref(input));
                        self.input_shape_error(&x, other, &inst_str, format!("`{expected}`"), origin)
                    }
                };
                mk(
                    ExprKind::CallInstance { callee: Box::new(callee), call: InstanceCall::Primitive, args: vec![x] },
                    ty,
                    span,
                )
            }
            Instance::LayerNorm { dim } => {
                let [arg] = args else {
                    return self.primitive_arity(&inst_str, args, span);
                };
                let x = self.check_expr(arg, None);
                let ty = match &x.ty {
                    // Normalised over the last axis, which the weight and bias scale and shift.
                    Ty::Tensor(s) if s.last() == Some(dim) => x.ty.clone(),
                    Ty::Error => Ty::Error,
                    other => {
                        let expected = crate::shape::shape_with_values(std::slice::from_ref(dim));
                        let expected = format!("`{expected}` (or `f32[.., {dim}]`)");
                        self.input_shape_error(&x, other, &inst_str, expected, origin)
                    }
                };
                mk(
                    ExprKind::CallInstance { callee: Box::new(callee), call: InstanceCall::Primitive, args: vec![x] },
                    ty,
                    span,
                )
            }
            Instance::Embedding { dim, .. } => {
                let [arg] = args else {
                    return self.primitive_arity(&inst_str, args, span);
                };
                let x = self.check_expr(arg, Some(&Ty::Int));
                if !x.ty.fits(&Ty::Int) {
                    let shown = self.ck.ty_str(&x.ty);
                    let mut d = Diagnostic::new(
                        Code::TypeMismatch,
                        x.span,
                        format!("`{inst_str}` looks up an `int` index, found `{shown}`"),
                    )
                    .with_primary(format!("this is `{shown}`"));
                    if let Some(o) = origin {
                        d = d.with_label(o, format!("declared as `{inst_str}` here"));
                    }
                    self.ck.error(d);
                }
                let ty = Ty::Tensor(vec![dim.clone()]);
                mk(
                    ExprKind::CallInstance { callee: Box::new(callee), call: InstanceCall::Primitive, args: vec![x] },
                    ty,
                    span,
                )
            }
            Instance::Layer { layer, args: layer_args } => {
                let layer_def = &self.ck.program.components[layer.0 as usize];
                let fn_name = method.map_or("apply", |m| m.name.as_str());
                let Some(fi) = layer_def.fn_named(fn_name) else {
                    let (lname, lspan) = (layer_def.name.clone(), layer_def.span);
                    let fns: Vec<String> = layer_def.fns.iter().map(|f| format!("`{}`", f.name)).collect();
                    let d = match method {
                        None => Diagnostic::new(
                            Code::MissingApply,
                            callee.span,
                            format!("layer `{lname}` has no `apply`, so its instances cannot be called"),
                        )
                        .with_primary("called here")
                        .with_label(lspan, "layer defined here")
                        .with_note(format!(
                            "its functions are: {}",
                            if fns.is_empty() { "none".into() } else { fns.join(", ") }
                        ))
                        .with_help("call one of its functions, e.g. `cell.leaf(x)`"),
                        Some(m) => Diagnostic::new(
                            Code::UnknownMethod,
                            m.span,
                            format!("layer `{lname}` has no function `{}`", m.name),
                        )
                        .with_primary("unknown function")
                        .with_label(lspan, "layer defined here")
                        .with_note(format!("its functions are: {}", fns.join(", "))),
                    };
                    self.ck.error(d);
                    self.check_discarded(args);
                    return err_expr(span);
                };
                let f = &layer_def.fns[fi];
                let symbols: Vec<Symbol> = layer_def.hyperparams.iter().map(|h| h.symbol.clone()).collect();
                let map = |s: &Symbol| symbols.iter().position(|x| x == s).and_then(|i| layer_args.get(i).cloned());
                let params: Vec<Ty> =
                    f.params.iter().map(|p| substitute_ty(&f.locals[p.0 as usize].ty, &map)).collect();
                let ret = substitute_ty(&f.ret, &map);
                let def_span = f.span;
                if let Some(m) = method {
                    let sig: Vec<String> = params.iter().map(|t| self.ck.ty_str(t)).collect();
                    let hover = format!("fn {}({}) -> {}", m.name, sig.join(", "), self.ck.ty_str(&ret));
                    self.ck.reference(m.span, def_span, hover);
                }
                let label = format!("{inst_str}.{fn_name}");
                let args = self.check_args(args, &params, &label, span, origin.or(Some(def_span)));
                mk(
                    ExprKind::CallInstance { callee: Box::new(callee), call: InstanceCall::LayerFn(fi as u32), args },
                    ret,
                    span,
                )
            }
            Instance::Array { .. } => {
                self.ck.error(
                    Diagnostic::new(Code::NotCallable, callee.span, format!("`{inst_str}` is an array of parameters"))
                        .with_primary("index it first")
                        .with_help("call one element: `experts[i](x)`"),
                );
                self.check_discarded(args);
                err_expr(span)
            }
        }
    }

    /// Checks arguments of a call that already failed, for hover and nested errors only.
    /// Closures get their parameters bound to the unknown type, so their bodies are
    /// checked without claiming the closure itself is misplaced.
    pub(super) fn check_discarded(&mut self, args: &[ast::Expr]) {
        for a in args {
            match &a.kind {
                ast::ExprKind::Closure(params, body) => {
                    self.push_scope(a.span);
                    for p in params {
                        self.bind_pattern(p, &Ty::Error, false);
                    }
                    self.check_expr(body, None);
                    self.pop_scope();
                }
                _ => {
                    self.check_expr(a, None);
                }
            }
        }
    }

    /// E0301 for a layer's input of the wrong shape; `Ty::Error` for the call.
    fn input_shape_error(&mut self, x: &Expr, found: &Ty, inst: &str, expected: String, origin: Option<Span>) -> Ty {
        let shown = self.ck.ty_str(found);
        let mut d = Diagnostic::new(
            Code::LinearInputShape,
            x.span,
            format!("`{inst}` expects input {expected}, found `{shown}`"),
        )
        .with_primary(format!("this is `{shown}`"));
        if let Some(o) = origin {
            d = d.with_label(o, format!("declared as `{inst}` here"));
        }
        self.ck.error(d);
        Ty::Error
    }

    pub(super) fn primitive_arity(&mut self, inst: &str, args: &[ast::Expr], span: Span) -> Expr {
        self.ck.error(
            Diagnostic::new(Code::ArityMismatch, span, format!("`{inst}` takes 1 argument, {} given", args.len()))
                .with_primary("wrong number of arguments"),
        );
        self.check_discarded(args);
        err_expr(span)
    }
}
