//! Type and shape checking of function bodies.

use crate::collect::Checker;
use crate::typed::*;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self, ItemKind, MemberKind};
use std::collections::HashSet;

mod calls;
mod expr;
mod matching;

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
            scope_ends: vec![f.body.span.end],
            roots: def.params.iter().copied().collect(),
            smaller: HashSet::new(),
            calls: Vec::new(),
            type_written: false,
        };
        for &p in &def.params {
            let local = &def.locals[p.0 as usize];
            let hover = format!("{}: {}", local.name, fc.ck.ty_str(&local.ty));
            let scope = Span { end: f.body.span.end, ..local.span };
            fc.ck.program.local_scopes.push(LocalScope { def_span: local.span, scope });
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
    /// Parallel to `scopes`: where each scope's region ends (for completion's scopes).
    scope_ends: Vec<u32>,
    /// The function's parameters: recursion must make one of them smaller.
    roots: HashSet<LocalId>,
    /// Locals bound to a part of a root by `match` (structurally smaller values).
    smaller: HashSet<LocalId>,
    calls: Vec<Call>,
    /// Set while binding the names of an annotated `let` or `var`: their types are
    /// written, so they are not [`InferredBinding`]s.
    type_written: bool,
}

pub(super) fn mk(kind: ExprKind, ty: Ty, span: Span) -> Expr {
    Expr { kind, ty, span }
}

pub(super) fn err_expr(span: Span) -> Expr {
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
        if !self.type_written && !ty.contains_error() {
            let shown = self.ck.ty_str(&ty);
            self.ck.program.inferred_bindings.push(InferredBinding { name_span: name.span, ty: shown });
        }
        self.locals.push(LocalDef { name: name.name.clone(), ty, span: name.span, mutable });
        self.used.push(false);
        if let Some(&end) = self.scope_ends.last() {
            let scope = Span { end: end.max(name.span.end), ..name.span };
            self.ck.program.local_scopes.push(LocalScope { def_span: name.span, scope });
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.push((name.name.clone(), id));
        }
        id
    }

    fn lookup_local(&self, name: &str) -> Option<LocalId> {
        self.scopes.iter().rev().flat_map(|s| s.iter().rev()).find(|(n, _)| n == name).map(|(_, id)| *id)
    }

    /// Opens a scope whose names are visible up to the end of `region`.
    fn push_scope(&mut self, region: Span) {
        self.scopes.push(Vec::new());
        self.scope_ends.push(region.end);
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
        if depth < self.scope_ends.len() {
            self.scope_ends.remove(depth);
        }
        let warn = !self.ck.modules[self.module].is_std;
        for (name, id) in scope {
            if !self.used[id.0 as usize] && !name.starts_with('_') && warn {
                let span = self.locals[id.0 as usize].span;
                self.ck.error(
                    Diagnostic::new(Code::UnusedVariable, span, format!("unused variable `{name}`"))
                        .with_primary("never read")
                        .with_help(format!("if this is intentional, name it `_{name}`"))
                        .with_replacement(format!("_{name}")),
                );
            }
        }
    }

    // ------------------------------------------------------------ blocks and statements

    fn check_block(&mut self, block: &ast::Block, expected: Option<&Ty>) -> Block {
        self.push_scope(block.span);
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

    /// Checks a `let`/`var` initialiser against its optional annotation. On a mismatch the
    /// binding keeps the annotation when `keep_annotation` (a `var`'s declared type is what
    /// its loop is checked against), else gets the unknown type (either side may be the
    /// mistake, and its uses do not repeat the error).
    fn check_annotated(
        &mut self,
        annotation: Option<&ast::TypeExpr>,
        value: &ast::Expr,
        keep_annotation: bool,
    ) -> (Expr, Ty) {
        let annotated = annotation.map(|t| (self.resolve_local_type(t), t.span));
        let value = self.check_expr(value, annotated.as_ref().map(|a| &a.0));
        let ty = match annotated {
            Some((t, span)) if !value.ty.fits(&t) => {
                let d = self.mismatch(&t, &value.ty, value.span, "the value does not fit the annotation");
                self.ck.error(d.with_label(span, "annotation here"));
                if keep_annotation {
                    t
                } else {
                    Ty::Error
                }
            }
            Some((t, _)) => t,
            None => value.ty.clone(),
        };
        (value, ty)
    }

    fn check_stmt(&mut self, stmt: &ast::Stmt) -> Option<Stmt> {
        match &stmt.kind {
            ast::StmtKind::Let(pat, ty, value) => {
                let (value, bound) = self.check_annotated(ty.as_ref(), value, false);
                self.type_written = ty.is_some();
                let pattern = self.bind_pattern(pat, &bound, false);
                self.type_written = false;
                Some(Stmt::Let(pattern, value))
            }
            ast::StmtKind::Var(name, ty, value) => {
                let (value, bound) = self.check_annotated(ty.as_ref(), value, true);
                self.type_written = ty.is_some();
                let id = self.declare_local(name, bound, true);
                self.type_written = false;
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
                self.push_scope(stmt.span);
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
}

/// Where to point when talking about the value of a branch.
pub(super) fn branch_value_span(e: &Expr) -> Span {
    match &e.kind {
        ExprKind::Block(b) => b.tail.as_ref().map_or(b.span, |t| t.span),
        _ => e.span,
    }
}

pub(super) fn collect_binds(p: &Pattern, out: &mut HashSet<LocalId>) {
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
