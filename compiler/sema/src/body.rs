//! Type and shape checking of function bodies.

use crate::collect::{const_hover, substitute_ty, suggest, Checker, Global};
use crate::shape::Symbol;
use crate::typed::*;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self, BinOp, ItemKind, MemberKind, UnOp};
use std::collections::HashSet;
use std::sync::Arc;

/// A call between functions of one component, for the recursion check.
pub(crate) struct Call {
    pub caller: u32,
    pub callee: u32,
    pub span: Span,
    /// Some argument is structurally smaller than the caller's input.
    pub structural: bool,
}

pub(crate) fn check_component_bodies(ck: &mut Checker, comp: ComponentId) -> Vec<Call> {
    let info = &ck.components[comp.0 as usize];
    let (module, item, index) = (info.module, info.item.clone(), info.item_index);
    let ItemKind::Component(c) = &item.items[index].kind else {
        return Vec::new();
    };
    let mut calls = Vec::new();
    let mut seen = HashSet::new();
    let fns: Vec<&ast::FnDecl> = c
        .members
        .iter()
        .filter_map(|m| match &m.kind {
            MemberKind::Fn(f) => Some(f),
            _ => None,
        })
        .collect();
    // Functions without `-> T` first: when one turns out to return a value (E0508), its
    // result type becomes unknown before its callers are checked, so that they do not
    // report the same mistake again as a type mismatch.
    let order = fns.iter().filter(|f| f.ret.is_none()).chain(fns.iter().filter(|f| f.ret.is_some()));
    for f in order {
        let Some(&fn_index) = ck.components[comp.0 as usize].fns.get(&f.name.name) else {
            continue;
        };
        if !seen.insert(fn_index) {
            continue; // a duplicate definition, already reported
        }
        let def = ck.program.components[comp.0 as usize].fns[fn_index as usize].clone();
        let mut fc = FnChecker {
            ck: &mut *ck,
            comp,
            module,
            fn_index,
            used: vec![false; def.locals.len()],
            locals: def.locals.clone(),
            scopes: vec![def.params.iter().map(|&p| (def.locals[p.0 as usize].name.clone(), p)).collect()],
            roots: def.params.iter().copied().collect(),
            smaller: HashSet::new(),
            calls: Vec::new(),
        };
        for &p in &def.params {
            let local = &def.locals[p.0 as usize];
            let hover = format!("{}: {}", local.name, fc.ck.ty_str(&local.ty));
            fc.ck.program.references.push(Reference { use_span: local.span, def_span: local.span, hover });
        }
        let body = fc.check_block(&f.body, Some(&def.ret));
        let body_ty = body.tail.as_ref().map_or(Ty::unit(), |t| t.ty.clone());
        let returns_undeclared = f.ret.is_none() && !body_ty.fits(&Ty::unit());
        if returns_undeclared {
            let shown = fc.ck.ty_str(&body_ty);
            let span = body.tail.as_ref().map_or(f.body.span, |t| t.span);
            fc.ck.error(
                Diagnostic::new(
                    Code::MissingReturnType,
                    f.name.span,
                    format!("`{}` returns `{shown}` but declares no return type", f.name.name),
                )
                .with_primary("no `-> T` here")
                .with_label(span, format!("this is `{shown}`"))
                .with_help(format!("declare it: `fn {}(...) -> {shown}`", f.name.name)),
            );
        } else if f.ret.is_some() && !body_ty.fits(&def.ret) {
            let span = body.tail.as_ref().map_or(f.body.span, |t| t.span);
            let ret_span = f.ret.as_ref().map_or(f.name.span, |r| r.span);
            let d = fc.mismatch(&def.ret, &body_ty, span, "the function body has the wrong type");
            fc.ck.error(d.with_label(ret_span, "return type declared here"));
        }
        fc.pop_scope_warn_unused(0);
        let locals = std::mem::take(&mut fc.locals);
        calls.append(&mut fc.calls);
        let target = &mut ck.program.components[comp.0 as usize].fns[fn_index as usize];
        target.body = body;
        target.locals = locals;
        if returns_undeclared {
            target.ret = Ty::Error;
        }
    }
    calls
}

struct FnChecker<'c, 'm> {
    ck: &'c mut Checker<'m>,
    comp: ComponentId,
    module: usize,
    fn_index: u32,
    locals: Vec<LocalDef>,
    used: Vec<bool>,
    scopes: Vec<Vec<(String, LocalId)>>,
    /// The function's parameters: recursion must make one of them smaller.
    roots: HashSet<LocalId>,
    /// Locals bound to a part of a root by `match` (structurally smaller values).
    smaller: HashSet<LocalId>,
    calls: Vec<Call>,
}

fn mk(kind: ExprKind, ty: Ty, span: Span) -> Expr {
    Expr { kind, ty, span }
}

fn err_expr(span: Span) -> Expr {
    mk(ExprKind::Error, Ty::Error, span)
}

impl FnChecker<'_, '_> {
    fn component(&self) -> &ComponentDef {
        &self.ck.program.components[self.comp.0 as usize]
    }

    pub(crate) fn mismatch(&self, expected: &Ty, found: &Ty, span: Span, what: &str) -> Diagnostic {
        let code = match (expected, found) {
            (Ty::Tensor(_), Ty::Tensor(_)) => Code::ShapeMismatch,
            _ => Code::TypeMismatch,
        };
        let (e, f) = (self.ck.ty_str(expected), self.ck.ty_str(found));
        Diagnostic::new(code, span, format!("{what}: expected `{e}`, found `{f}`"))
            .with_primary(format!("this is `{f}`"))
    }

    // ------------------------------------------------------------ locals

    fn declare_local(&mut self, name: &ast::Ident, ty: Ty, mutable: bool) -> LocalId {
        let id = LocalId(self.locals.len() as u32);
        let hover = format!("{}{}: {}", if mutable { "var " } else { "" }, name.name, self.ck.ty_str(&ty));
        self.ck.reference(name.span, name.span, hover);
        self.locals.push(LocalDef { name: name.name.clone(), ty, span: name.span, mutable });
        self.used.push(false);
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name.name.clone(), id));
        }
        id
    }

    fn lookup_local(&self, name: &str) -> Option<LocalId> {
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    fn pop_scope(&mut self) {
        let depth = self.scopes.len() - 1;
        self.pop_scope_warn_unused(depth);
    }

    fn pop_scope_warn_unused(&mut self, depth: usize) {
        if depth >= self.scopes.len() {
            return;
        }
        let scope = self.scopes.remove(depth);
        let is_main = self.ck.modules[self.module].is_main;
        for (name, id) in scope {
            if !self.used[id.0 as usize] && !name.starts_with('_') && is_main {
                let span = self.locals[id.0 as usize].span;
                self.ck.error(
                    Diagnostic::new(Code::UnusedVariable, span, format!("unused variable `{name}`"))
                        .with_primary("never read")
                        .with_help(format!("if this is intentional, name it `_{name}`")),
                );
            }
        }
    }

    // ------------------------------------------------------------ blocks and statements

    fn check_block(&mut self, block: &ast::Block, expected: Option<&Ty>) -> Block {
        self.push_scope();
        let stmts = block.stmts.iter().filter_map(|s| self.check_stmt(s)).collect();
        let tail = block.tail.as_ref().map(|t| Box::new(self.check_expr(t, expected)));
        self.pop_scope();
        Block { stmts, tail, span: block.span }
    }

    /// Runs `f` with this function's variables visible to constant evaluation, so that a
    /// dimension naming a variable is reported as not constant (E0209) rather than as an
    /// unknown name, and the variable counts as used.
    fn with_locals_visible<T>(&mut self, f: impl FnOnce(&mut Checker) -> T) -> T {
        self.ck.body_locals = self.scopes.iter().flatten().map(|(n, _)| n.clone()).collect();
        let out = f(&mut *self.ck);
        self.ck.body_locals.clear();
        for name in std::mem::take(&mut self.ck.body_locals_named) {
            if let Some(id) = self.lookup_local(&name) {
                self.used[id.0 as usize] = true;
            }
        }
        out
    }

    /// A type written inside a function body (a `let` or `var` annotation).
    fn resolve_local_type(&mut self, t: &ast::TypeExpr) -> Ty {
        let (module, comp) = (self.module, self.comp);
        self.with_locals_visible(|ck| ck.resolve_type(module, Some(comp), t))
    }

    fn block_ty(block: &Block) -> Ty {
        block.tail.as_ref().map_or(Ty::unit(), |t| t.ty.clone())
    }

    fn check_stmt(&mut self, stmt: &ast::Stmt) -> Option<Stmt> {
        match &stmt.kind {
            ast::StmtKind::Let(pat, ty, value) => {
                let annotated = ty.as_ref().map(|t| (self.resolve_local_type(t), t.span));
                let value = self.check_expr(value, annotated.as_ref().map(|a| &a.0));
                let ty = match annotated {
                    Some((t, span)) => {
                        if !value.ty.fits(&t) {
                            let d = self.mismatch(&t, &value.ty, value.span, "the value does not fit the annotation");
                            self.ck.error(d.with_label(span, "annotation here"));
                            // Either side may be the mistake: the binding's type is
                            // unknown, so its uses do not repeat the error.
                            Ty::Error
                        } else {
                            t
                        }
                    }
                    None => value.ty.clone(),
                };
                let pattern = self.bind_pattern(pat, &ty, false);
                Some(Stmt::Let(pattern, value))
            }
            ast::StmtKind::Var(name, ty, value) => {
                let annotated = ty.as_ref().map(|t| (self.resolve_local_type(t), t.span));
                let value = self.check_expr(value, annotated.as_ref().map(|a| &a.0));
                let ty = match annotated {
                    Some((t, span)) => {
                        if !value.ty.fits(&t) {
                            let d = self.mismatch(&t, &value.ty, value.span, "the value does not fit the annotation");
                            self.ck.error(d.with_label(span, "annotation here"));
                        }
                        t
                    }
                    None => value.ty.clone(),
                };
                let id = self.declare_local(name, ty, true);
                Some(Stmt::Var(id, value))
            }
            ast::StmtKind::Assign(target, value) => self.check_assign(target, value),
            ast::StmtKind::For(pat, iter, body) => {
                let iter = self.check_expr(iter, None);
                let elem = match &iter.ty {
                    Ty::Seq(t) => (**t).clone(),
                    Ty::Error => Ty::Error,
                    other => {
                        let shown = self.ck.ty_str(other);
                        self.ck.error(
                            Diagnostic::new(
                                Code::NotIterable,
                                iter.span,
                                format!("`for` needs a sequence, found `{shown}`"),
                            )
                            .with_primary(format!("this is `{shown}`"))
                            .with_help("iterate over a sequence `[T]`, or a range `0..n`"),
                        );
                        Ty::Error
                    }
                };
                self.push_scope();
                let pattern = self.bind_pattern(pat, &elem, false);
                let body = self.check_block(body, Some(&Ty::unit()));
                self.pop_scope();
                Some(Stmt::For(pattern, iter, body))
            }
            ast::StmtKind::While(cond, body) => {
                let cond = self.check_condition(cond);
                let body = self.check_block(body, Some(&Ty::unit()));
                Some(Stmt::While(cond, body))
            }
            ast::StmtKind::Expr(e) => Some(Stmt::Expr(self.check_expr(e, None))),
        }
    }

    fn check_assign(&mut self, target: &ast::Expr, value: &ast::Expr) -> Option<Stmt> {
        let ast::ExprKind::Name(name) = &target.kind else {
            let value = self.check_expr(value, None);
            if !matches!(target.kind, ast::ExprKind::Error) {
                self.ck.error(
                    Diagnostic::new(Code::InvalidAssignTarget, target.span, "only a `var` can be assigned")
                        .with_primary("not a variable name")
                        .with_note("tensors, fields and elements are immutable; build a new value instead"),
                );
            }
            return Some(Stmt::Expr(value));
        };
        let Some(id) = self.lookup_local(&name.name) else {
            let value = self.check_expr(value, None);
            if self.ck.components[self.comp.0 as usize].params.contains_key(&name.name) {
                self.ck.error(
                    Diagnostic::new(
                        Code::ParamOutsideModel,
                        name.span,
                        format!("cannot assign to parameter `{}`", name.name),
                    )
                    .with_primary("parameters are read-only")
                    .with_note("parameters change only through training updates"),
                );
            } else {
                self.unknown_name(name);
            }
            return Some(Stmt::Expr(value));
        };
        let local = self.locals[id.0 as usize].clone();
        let value = self.check_expr(value, Some(&local.ty));
        if !local.mutable {
            self.ck.error(
                Diagnostic::new(Code::AssignToImmutable, name.span, format!("cannot assign twice to `{}`", name.name))
                    .with_primary("assigned here")
                    .with_label(local.span, "declared with `let` (or as a parameter) here")
                    .with_help(format!("declare it with `var {}` to make it loop-carried", name.name)),
            );
        } else if !value.ty.fits(&local.ty) {
            let (old, new) = (self.ck.ty_str(&local.ty), self.ck.ty_str(&value.ty));
            self.ck.error(
                Diagnostic::new(
                    Code::LoopCarriedTypeChange,
                    value.span,
                    format!("`{}` changes type from `{old}` to `{new}`", name.name),
                )
                .with_primary(format!("this is `{new}`"))
                .with_label(local.span, format!("declared as `{old}` here"))
                .with_note(
                    "a `var` keeps one type: its value circulates around the loop as a message of a fixed shape",
                ),
            );
        }
        self.ck.reference(name.span, local.span, format!("var {}: {}", local.name, self.ck.ty_str(&local.ty)));
        Some(Stmt::Assign(id, value))
    }

    // ------------------------------------------------------------ patterns

    /// Binds an irrefutable pattern (let, for, closure parameter) to a type.
    fn bind_pattern(&mut self, pat: &ast::Pattern, ty: &Ty, mutable: bool) -> Pattern {
        match &pat.kind {
            ast::PatternKind::Bind(name) => Pattern::Bind(self.declare_local(name, ty.clone(), mutable)),
            ast::PatternKind::Wildcard => Pattern::Wildcard,
            ast::PatternKind::Tuple(ps) | ast::PatternKind::Array(ps) => {
                let elems: Vec<Ty> = match ty {
                    Ty::Tuple(ts) if ts.len() == ps.len() => ts.clone(),
                    Ty::Error => vec![Ty::Error; ps.len()],
                    other => {
                        let shown = self.ck.ty_str(other);
                        let what = match other {
                            Ty::Tuple(ts) => format!("a tuple of {} values", ts.len()),
                            _ => format!("`{shown}`"),
                        };
                        self.ck.error(
                            Diagnostic::new(
                                Code::PatternMismatch,
                                pat.span,
                                format!("this pattern takes {} parts but the value is {what}", ps.len()),
                            )
                            .with_primary(format!("the value is `{shown}`")),
                        );
                        vec![Ty::Error; ps.len()]
                    }
                };
                let parts = ps.iter().zip(&elems).map(|(p, t)| self.bind_pattern(p, t, mutable)).collect();
                Pattern::Tuple(parts)
            }
            ast::PatternKind::Variant { name, .. } => {
                self.ck.error(
                    Diagnostic::new(
                        Code::PatternMismatch,
                        pat.span,
                        format!("variant pattern `{}` can fail to match here", name.name),
                    )
                    .with_primary("refutable pattern")
                    .with_help("use `match` to take an enum apart"),
                );
                Pattern::Wildcard
            }
        }
    }

    // ------------------------------------------------------------ expressions

    fn check_expr(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Expr {
        let out = self.check_expr_inner(e, expected);
        if !matches!(out.kind, ExprKind::Error) {
            let shown = self.ck.ty_str(&out.ty);
            self.ck.program.expr_types.push((out.span, shown));
        }
        out
    }

    fn check_expr_inner(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Expr {
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

    fn unknown_name(&mut self, name: &ast::Ident) {
        let mut candidates: Vec<String> = self.scopes.iter().flatten().map(|(n, _)| n.clone()).collect();
        let info = &self.ck.components[self.comp.0 as usize];
        candidates.extend(info.params.keys().cloned());
        candidates.extend(info.hyperparams.keys().cloned());
        candidates.extend(info.consts.keys().cloned());
        candidates.extend(info.fns.keys().cloned());
        candidates.extend(self.ck.modules[self.module].scope.keys().cloned());
        candidates.extend(Builtin::ALL.iter().map(|b| b.name().to_string()));
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
            d = d.with_help(format!("did you mean `{s}`?"));
        }
        self.ck.error(d);
    }

    fn check_name(&mut self, name: &ast::Ident, span: Span) -> Expr {
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
            let (def, hover) = (
                hp.span,
                match hp.value {
                    Some(v) => format!("{}: int = {v}", hp.name),
                    None => format!("{}: int", hp.name),
                },
            );
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
                if Builtin::from_name(&name.name).is_some() || name.name == "Linear" || name.name == "Embedding" {
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

    fn expect_int(&mut self, e: &ast::Expr, what: &str) -> Expr {
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
    fn check_condition(&mut self, e: &ast::Expr) -> Expr {
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

    fn check_unary(&mut self, op: UnOp, inner: &ast::Expr, span: Span) -> Expr {
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

    fn check_binary(&mut self, op: BinOp, a: &ast::Expr, b: &ast::Expr, span: Span) -> Expr {
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

    fn binary_type(&mut self, op: BinOp, x: &Expr, y: &Expr, span: Span) -> Ty {
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

    fn check_field(&mut self, obj: &ast::Expr, field: &ast::Ident, span: Span) -> Expr {
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
                            d = d.with_help(format!("did you mean `{s}`?"));
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

    fn check_index(&mut self, obj: &ast::Expr, index: &ast::Expr, span: Span) -> Expr {
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

    fn not_indexable(&mut self, obj: &Expr) -> Ty {
        let shown = self.ck.ty_str(&obj.ty);
        self.ck.error(
            Diagnostic::new(Code::NotIndexable, obj.span, format!("`{shown}` cannot be indexed"))
                .with_primary(format!("this is `{shown}`"))
                .with_note("sequences, tensors and parameter arrays can be indexed with an `int`"),
        );
        Ty::Error
    }

    fn check_if(
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

    fn check_match(
        &mut self,
        scrutinee: &ast::Expr,
        arms: &[ast::MatchArm],
        span: Span,
        expected: Option<&Ty>,
    ) -> Expr {
        let scrut = self.check_expr(scrutinee, None);
        let rooted = self.is_rooted(&scrut);
        let enum_id = match &scrut.ty {
            Ty::Enum(id) => Some(*id),
            Ty::Error => None,
            other => {
                let shown = self.ck.ty_str(other);
                self.ck.error(
                    Diagnostic::new(
                        Code::MatchOnNonEnum,
                        scrut.span,
                        format!("`match` needs an enum, found `{shown}`"),
                    )
                    .with_primary(format!("this is `{shown}`"))
                    .with_help("use `if` for ints and bools"),
                );
                None
            }
        };
        let variants: Vec<VariantDef> =
            enum_id.map(|id| self.ck.program.enums[id.0 as usize].variants.clone()).unwrap_or_default();
        let enum_name = enum_id.map(|id| self.ck.program.enums[id.0 as usize].name.clone()).unwrap_or_default();
        let mut covered = vec![false; variants.len()];
        let mut all_covered = false;
        let mut out_arms = Vec::new();
        let mut result_ty: Option<(Ty, Span)> = None;
        for arm in arms {
            if all_covered && enum_id.is_some() {
                self.ck.error(
                    Diagnostic::new(Code::UnreachableArm, arm.pattern.span, "unreachable match arm")
                        .with_primary("earlier arms already match every value"),
                );
            }
            self.push_scope();
            let (variant, bindings) = match enum_id {
                Some(_) => self.check_arm_pattern(
                    &scrut.ty.clone(),
                    &arm.pattern,
                    &variants,
                    &enum_name,
                    rooted,
                    &mut covered,
                    &mut all_covered,
                ),
                None => {
                    self.bind_error_pattern(&arm.pattern);
                    (None, Vec::new())
                }
            };
            let body = self.check_expr(&arm.body, expected.or(result_ty.as_ref().map(|r| &r.0)));
            self.pop_scope();
            match &result_ty {
                None => result_ty = Some((body.ty.clone(), branch_value_span(&body))),
                Some((t, first_span)) if !body.ty.fits(t) => {
                    let (a, b) = (self.ck.ty_str(t), self.ck.ty_str(&body.ty));
                    self.ck.error(
                        Diagnostic::new(
                            Code::BranchMismatch,
                            branch_value_span(&body),
                            format!("match arms have different types: `{a}` vs `{b}`"),
                        )
                        .with_primary(format!("this arm is `{b}`"))
                        .with_label(*first_span, format!("the first arm is `{a}`")),
                    );
                }
                Some((t, s)) if t.is_error() => result_ty = Some((body.ty.clone(), *s)),
                Some(_) => {}
            }
            out_arms.push(MatchArm { variant, bindings, body, span: arm.span });
        }
        // An arm naming an unknown variant was probably meant for a missing one (already
        // reported), so coverage is not judged.
        let unknown_variant = arms.iter().any(|a| {
            matches!(&a.pattern.kind, ast::PatternKind::Variant { name, .. }
                if !variants.iter().any(|v| v.name == name.name))
        });
        if enum_id.is_some() && !all_covered && !unknown_variant {
            let missing: Vec<String> =
                variants.iter().zip(&covered).filter(|(_, c)| !**c).map(|(v, _)| format!("`{}`", v.name)).collect();
            if !missing.is_empty() {
                self.ck.error(
                    Diagnostic::new(
                        Code::NonExhaustiveMatch,
                        scrut.span,
                        format!("non-exhaustive match: {} not covered", missing.join(", ")),
                    )
                    .with_primary("some variants are not matched")
                    .with_help("add an arm for each missing variant, or a `_ => ...` arm"),
                );
            }
        }
        let ty = result_ty.map_or(Ty::unit(), |r| r.0);
        mk(ExprKind::Match(Box::new(scrut), out_arms), ty, span)
    }

    #[allow(clippy::too_many_arguments)]
    fn check_arm_pattern(
        &mut self,
        scrut_ty: &Ty,
        pat: &ast::Pattern,
        variants: &[VariantDef],
        enum_name: &str,
        rooted: bool,
        covered: &mut [bool],
        all_covered: &mut bool,
    ) -> (Option<u32>, Vec<(u32, Pattern)>) {
        let (name, fields, rest) = match &pat.kind {
            ast::PatternKind::Wildcard => {
                *all_covered = true;
                return (None, Vec::new());
            }
            ast::PatternKind::Bind(name) if !variants.iter().any(|v| v.name == name.name) => {
                *all_covered = true;
                let _ = self.declare_local(name, scrut_ty.clone(), false);
                return (None, Vec::new());
            }
            ast::PatternKind::Bind(name) => (name, &[][..], true),
            ast::PatternKind::Variant { name, fields, rest } => (name, &fields[..], *rest),
            _ => {
                self.ck.error(
                    Diagnostic::new(Code::PatternMismatch, pat.span, format!("expected a variant of `{enum_name}`"))
                        .with_primary("not a variant pattern"),
                );
                return (None, Vec::new());
            }
        };
        let Some(vi) = variants.iter().position(|v| v.name == name.name) else {
            let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
            let mut d = Diagnostic::new(
                Code::UnknownVariant,
                name.span,
                format!("enum `{enum_name}` has no variant `{}`", name.name),
            )
            .with_primary("unknown variant")
            .with_note(format!("its variants are: {}", names.join(", ")));
            if let Some(s) = suggest(&name.name, names.iter().copied()) {
                d = d.with_help(format!("did you mean `{s}`?"));
            }
            self.ck.error(d);
            // Its bindings exist, with unknown types, so the arm's body is still checked
            // without reporting them as unknown names.
            self.bind_error_pattern(pat);
            return (None, Vec::new());
        };
        let variant = &variants[vi];
        // After a catch-all, the caller already reported this arm as unreachable.
        if covered[vi] && !*all_covered {
            self.ck.error(
                Diagnostic::new(Code::UnreachableArm, pat.span, format!("variant `{}` is already matched", name.name))
                    .with_primary("unreachable arm"),
            );
        }
        covered[vi] = true;
        if covered.iter().all(|c| *c) {
            *all_covered = true;
        }
        self.ck.reference(name.span, variant.span, format!("{enum_name}::{}", variant.name));
        let mut bindings = Vec::new();
        let mut mentioned = vec![false; variant.fields.len()];
        let mut unknown_field = false;
        for fp in fields {
            let Some(fi) = variant.fields.iter().position(|f| f.name == fp.field.name) else {
                let names: Vec<&str> = variant.fields.iter().map(|f| f.name.as_str()).collect();
                let mut d = Diagnostic::new(
                    Code::UnknownField,
                    fp.field.span,
                    format!("variant `{}` has no field `{}`", variant.name, fp.field.name),
                )
                .with_primary("unknown field")
                .with_label(variant.span, "variant defined here");
                if let Some(s) = suggest(&fp.field.name, names.iter().copied()) {
                    d = d.with_help(format!("did you mean `{s}`?"));
                }
                self.ck.error(d);
                // Bind it anyway (type unknown) so its uses are not unknown names too.
                match &fp.pattern {
                    None => {
                        self.declare_local(&fp.field, Ty::Error, false);
                    }
                    Some(p) => {
                        self.bind_pattern(p, &Ty::Error, false);
                    }
                }
                unknown_field = true;
                continue;
            };
            mentioned[fi] = true;
            let field = &variant.fields[fi];
            let pattern = match &fp.pattern {
                None => Pattern::Bind(self.declare_local(&fp.field, field.ty.clone(), false)),
                Some(p) => self.bind_pattern(p, &field.ty, false),
            };
            if rooted {
                collect_binds(&pattern, &mut self.smaller);
            }
            bindings.push((fi as u32, pattern));
        }
        // With a misspelt field, the missing one is most likely that field: one error.
        if !rest && !unknown_field && mentioned.iter().any(|m| !m) {
            let missing: Vec<String> = variant
                .fields
                .iter()
                .zip(&mentioned)
                .filter(|(_, m)| !**m)
                .map(|(f, _)| format!("`{}`", f.name))
                .collect();
            self.ck.error(
                Diagnostic::new(
                    Code::MissingPatternFields,
                    pat.span,
                    format!("pattern does not mention {}", missing.join(", ")),
                )
                .with_primary("fields missing")
                .with_help("list them, or end the pattern with `..` to ignore the rest"),
            );
        }
        (Some(vi as u32), bindings)
    }

    /// Whether `e` is a parameter or a part of one (for structural recursion).
    fn is_rooted(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Local(id) => self.roots.contains(id) || self.smaller.contains(id),
            ExprKind::Field(inner, _) | ExprKind::TupleField(inner, _) => self.is_rooted(inner),
            _ => false,
        }
    }

    /// Whether `e` is strictly smaller than a parameter.
    fn is_smaller(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Local(id) => self.smaller.contains(id),
            ExprKind::Field(inner, _) | ExprKind::TupleField(inner, _) => self.is_rooted(inner),
            _ => false,
        }
    }

    // ------------------------------------------------------------ calls

    fn check_args(
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

    fn check_call(&mut self, callee: &ast::Expr, args: &[ast::Expr], span: Span, expected: Option<&Ty>) -> Expr {
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
                if matches!(name.name.as_str(), "Linear" | "Embedding")
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

    fn call_fn(&mut self, f: u32, name: &ast::Ident, args: &[ast::Expr], span: Span) -> Expr {
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

    fn call_method(&mut self, obj: Expr, method: &ast::Ident, args: &[ast::Expr], span: Span) -> Expr {
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

    fn check_map(&mut self, seq: Expr, elem: &Ty, args: &[ast::Expr], span: Span) -> Expr {
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
        self.push_scope();
        let param = self.bind_pattern(&params[0], elem, false);
        let body = self.check_expr(body, None);
        self.pop_scope();
        let ty = if body.ty.is_error() { Ty::Error } else { Ty::Seq(Box::new(body.ty.clone())) };
        mk(ExprKind::Map { seq: Box::new(seq), param, body: Box::new(body) }, ty, span)
    }

    /// The declaration site of the param behind an instance expression, for labels.
    fn instance_origin(&self, e: &Expr) -> Option<Span> {
        match &e.kind {
            ExprKind::Param(p) => self.component().params.get(*p as usize).map(|p| p.span),
            ExprKind::Index(inner, _) => self.instance_origin(inner),
            _ => None,
        }
    }

    fn call_instance(
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
                        let shown = self.ck.ty_str(other);
                        let mut d = Diagnostic::new(
                            Code::LinearInputShape,
                            x.span,
                            format!("`{inst_str}` expects input `{expected}`, found `{shown}`"),
                        )
                        .with_primary(format!("this is `{shown}`"));
                        if let Some(o) = origin {
                            d = d.with_label(o, format!("declared as `{inst_str}` here"));
                        }
                        self.ck.error(d);
                        Ty::Error
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
    fn check_discarded(&mut self, args: &[ast::Expr]) {
        for a in args {
            match &a.kind {
                ast::ExprKind::Closure(params, body) => {
                    self.push_scope();
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

    /// Binds the names of a match arm whose scrutinee is not an enum, as unknown.
    fn bind_error_pattern(&mut self, pat: &ast::Pattern) {
        match &pat.kind {
            ast::PatternKind::Variant { fields, .. } => {
                for f in fields {
                    match &f.pattern {
                        None => {
                            self.declare_local(&f.field, Ty::Error, false);
                        }
                        Some(p) => {
                            self.bind_pattern(p, &Ty::Error, false);
                        }
                    }
                }
            }
            _ => {
                self.bind_pattern(pat, &Ty::Error, false);
            }
        }
    }

    fn primitive_arity(&mut self, inst: &str, args: &[ast::Expr], span: Span) -> Expr {
        self.ck.error(
            Diagnostic::new(Code::ArityMismatch, span, format!("`{inst}` takes 1 argument, {} given", args.len()))
                .with_primary("wrong number of arguments"),
        );
        self.check_discarded(args);
        err_expr(span)
    }
}

/// Where to point when talking about the value of a branch.
fn branch_value_span(e: &Expr) -> Span {
    match &e.kind {
        ExprKind::Block(b) => b.tail.as_ref().map_or(b.span, |t| t.span),
        _ => e.span,
    }
}

fn collect_binds(p: &Pattern, out: &mut HashSet<LocalId>) {
    match p {
        Pattern::Bind(id) => {
            out.insert(*id);
        }
        Pattern::Tuple(ps) => ps.iter().for_each(|p| collect_binds(p, out)),
        Pattern::Wildcard => {}
    }
}

/// Gives builtins access to the body checker.
pub(crate) trait BodyChecker {
    fn check(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Expr;
    fn error(&mut self, d: Diagnostic);
    fn ty_str(&self, ty: &Ty) -> String;
    fn const_dim(&mut self, e: &ast::Expr) -> Option<crate::shape::Dim>;
    fn check_positive(&mut self, dim: &crate::shape::Dim, span: Span, what: &str) -> bool;
}

impl BodyChecker for FnChecker<'_, '_> {
    fn check(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Expr {
        self.check_expr(e, expected)
    }
    fn error(&mut self, d: Diagnostic) {
        self.ck.error(d)
    }
    fn ty_str(&self, ty: &Ty) -> String {
        self.ck.ty_str(ty)
    }
    fn const_dim(&mut self, e: &ast::Expr) -> Option<crate::shape::Dim> {
        let (module, comp) = (self.module, self.comp);
        self.with_locals_visible(|ck| ck.eval_dim_in(module, Some(comp), e))
    }
    fn check_positive(&mut self, dim: &crate::shape::Dim, span: Span, what: &str) -> bool {
        self.ck.check_positive(dim, span, what)
    }
}
