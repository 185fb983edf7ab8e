//! Types, fields, constants, and the name lookup of constant expressions.

use crate::consts::{eval_dim, DimScope};
use crate::shape::Dim;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self, ItemKind, TypeExpr, TypeExprKind};

use super::*;

impl Checker<'_> {
    // ------------------------------------------------------------ types

    /// Resolves a written type. Dimensions are evaluated in `scope`.
    pub(crate) fn resolve_type(&mut self, module: usize, comp: Option<ComponentId>, texpr: &TypeExpr) -> Ty {
        match &texpr.kind {
            TypeExprKind::Error => Ty::Error,
            TypeExprKind::Named(name) => match name.name.as_str() {
                "int" => Ty::Int,
                "bool" => Ty::Bool,
                "f32" => Ty::scalar(),
                other => match self.lookup_global(module, other) {
                    Some((Global::Record(id), def)) => {
                        self.reference(name.span, def, format!("record {other}"));
                        Ty::Record(id)
                    }
                    Some((Global::Enum(id), def)) => {
                        self.reference(name.span, def, format!("enum {other}"));
                        Ty::Enum(id)
                    }
                    Some((Global::Failed, _)) => Ty::Error,
                    Some((_, def)) => {
                        self.error(
                            Diagnostic::new(Code::UnknownType, name.span, format!("`{other}` is not a type"))
                                .with_primary("expected a type")
                                .with_label(def, "defined here"),
                        );
                        Ty::Error
                    }
                    None => {
                        let mut candidates: Vec<String> = vec!["int".into(), "bool".into(), "f32".into()];
                        candidates.extend(self.modules[module].scope.keys().cloned());
                        let mut d = Diagnostic::new(Code::UnknownType, name.span, format!("unknown type `{other}`"))
                            .with_primary("not a type in scope");
                        if let Some(s) = suggest(other, candidates.iter().map(String::as_str)) {
                            d = d.with_suggestion(s);
                        }
                        self.error(d);
                        Ty::Error
                    }
                },
            },
            TypeExprKind::Tensor(name, dims) => {
                if name.name != "f32" {
                    self.error(
                        Diagnostic::new(
                            Code::UnknownType,
                            name.span,
                            format!("`{}` cannot have dimensions", name.name),
                        )
                        .with_primary("only `f32` tensors have shapes")
                        .with_help("write `f32[...]`"),
                    );
                    return Ty::Error;
                }
                let mut shape = Vec::new();
                for d in dims {
                    match self.eval_dim_in(module, comp, d) {
                        Some(dim) => {
                            if !self.check_positive(&dim, d.span, "tensor dimension") {
                                return Ty::Error;
                            }
                            shape.push(dim)
                        }
                        None => return Ty::Error,
                    }
                }
                if !self.check_tensor_size(&shape, texpr.span) {
                    return Ty::Error;
                }
                Ty::Tensor(shape)
            }
            TypeExprKind::Seq(elem) => {
                let t = self.resolve_type(module, comp, elem);
                if t.is_error() {
                    Ty::Error
                } else {
                    Ty::Seq(Box::new(t))
                }
            }
            TypeExprKind::Tuple(elems) => {
                let ts: Vec<Ty> = elems.iter().map(|e| self.resolve_type(module, comp, e)).collect();
                Ty::Tuple(ts)
            }
        }
    }

    /// Reports E0307 for a known non-positive dimension; returns whether it is fine.
    pub(crate) fn check_positive(&mut self, dim: &Dim, span: Span, what: &str) -> bool {
        match dim.value {
            Some(v) if v <= 0 => {
                let mut d = Diagnostic::new(Code::NonPositiveDimension, span, format!("{what} `{dim}` is {v}"))
                    .with_primary(format!("evaluates to {v}"))
                    .with_note("every tensor dimension must be at least 1");
                let set: Vec<String> = dim
                    .poly
                    .symbols()
                    .filter_map(|s| {
                        self.overrides.iter().find(|o| *o.0 == *s.name).map(|o| format!("-D {}={}", o.0, o.1))
                    })
                    .collect();
                if !set.is_empty() {
                    d = d.with_note(format!("set on the command line with {}", set.join(", ")));
                }
                self.error(d);
                false
            }
            _ => true,
        }
    }

    /// Reports E0310 for a shape whose known element count is over
    /// `amp_ir::limits::MAX_TENSOR_ELEMENTS` (or overflows); returns whether it is fine.
    pub(crate) fn check_tensor_size(&mut self, shape: &[Dim], span: Span) -> bool {
        let values: Option<Vec<u64>> = shape.iter().map(|d| d.value.map(|v| v.max(0) as u64)).collect();
        let Some(values) = values else { return true };
        let Err(error) = amp_ir::limits::tensor_elements(&values) else { return true };
        let count = error.count.map_or_else(|| "more than 2^128".to_string(), |c| c.to_string());
        self.error(
            Diagnostic::new(Code::TooLarge, span, format!("this tensor has {count} elements"))
                .with_primary(format!("over the limit of {} elements", error.limit))
                .with_note("the limits are in docs/limits.md"),
        );
        false
    }

    pub(crate) fn eval_dim_in(&mut self, module: usize, comp: Option<ComponentId>, expr: &ast::Expr) -> Option<Dim> {
        let mut scope = ComponentScope { ck: self, module, comp };
        match eval_dim(expr, &mut scope) {
            Ok(d) => Some(d),
            Err(diag) => {
                self.error(*diag);
                None
            }
        }
    }

    pub(super) fn resolve_type_items(&mut self, module: usize) {
        let ast = self.modules[module].ast.clone();
        for item in &ast.items {
            match &item.kind {
                ItemKind::Record(r) => {
                    let fields = self.resolve_fields(module, &r.fields);
                    // A second item of the same name (reported as a duplicate) must not
                    // replace the fields of the first, which is the one names resolve to.
                    let Some((Global::Record(id), def)) = self.modules[module].scope.get(&r.name.name).cloned() else {
                        continue;
                    };
                    if def == r.name.span {
                        self.program.records[id.0 as usize].fields = fields;
                    }
                }
                ItemKind::Enum(e) => {
                    let Some((Global::Enum(id), def)) = self.modules[module].scope.get(&e.name.name).cloned() else {
                        continue;
                    };
                    // Only the first of duplicate enums is resolved (see records above).
                    if def != e.name.span {
                        continue;
                    }
                    let mut variants: Vec<VariantDef> = Vec::new();
                    for v in &e.variants {
                        if let Some(prev) = variants.iter().find(|p| p.name == v.name.name) {
                            let prev = prev.span;
                            self.error(
                                Diagnostic::new(
                                    Code::DuplicateDefinition,
                                    v.name.span,
                                    format!("variant `{}` is defined twice", v.name.name),
                                )
                                .with_primary("redefined here")
                                .with_label(prev, "first defined here"),
                            );
                            continue;
                        }
                        let fields = self.resolve_fields(module, &v.fields);
                        variants.push(VariantDef { name: v.name.name.clone(), fields, span: v.name.span });
                    }
                    let recursive = variants.iter().any(|v| v.fields.iter().any(|f| mentions_enum(&f.ty, id)));
                    let def = &mut self.program.enums[id.0 as usize];
                    def.variants = variants;
                    def.recursive = recursive;
                }
                _ => {}
            }
        }
    }

    pub(super) fn resolve_fields(&mut self, module: usize, decls: &[ast::FieldDecl]) -> Vec<FieldDef> {
        let mut fields: Vec<FieldDef> = Vec::new();
        for f in decls {
            if let Some(prev) = fields.iter().find(|p| p.name == f.name.name) {
                let prev = prev.span;
                self.error(
                    Diagnostic::new(
                        Code::DuplicateDefinition,
                        f.name.span,
                        format!("field `{}` is defined twice", f.name.name),
                    )
                    .with_primary("redefined here")
                    .with_label(prev, "first defined here"),
                );
                continue;
            }
            let ty = self.resolve_type(module, None, &f.ty);
            if let Ty::Instance(_) = ty {
                continue;
            }
            fields.push(FieldDef { name: f.name.name.clone(), ty, span: f.name.span });
        }
        fields
    }

    pub(crate) fn take_override(&mut self, name: &str) -> Option<i64> {
        let o = self.overrides.iter_mut().find(|o| o.0 == name)?;
        o.2 = true;
        Some(o.1)
    }

    pub(super) fn eval_global_consts(&mut self, module: usize) {
        let ast = self.modules[module].ast.clone();
        for item in &ast.items {
            let ItemKind::Const(c) = &item.kind else {
                continue;
            };
            match self.eval_const(module, None, c) {
                Some(dim) => self.define_global(module, &c.name, Global::Const(dim, c.name.span)),
                None => self.define_failed(module, &c.name),
            }
        }
    }

    /// Evaluates `const NAME: int = value;` to a dimension named after the constant.
    pub(super) fn eval_const(&mut self, module: usize, comp: Option<ComponentId>, c: &ast::ConstItem) -> Option<Dim> {
        let ty = self.resolve_type(module, comp, &c.ty);
        if ty != Ty::Int && !ty.is_error() {
            let shown = self.ty_str(&ty);
            self.error(
                Diagnostic::new(Code::InvalidTypeHere, c.ty.span, format!("constants must be `int`, not `{shown}`"))
                    .with_primary("not `int`"),
            );
            return None;
        }
        let overridden =
            if self.modules[module].is_main && comp.is_none() { self.take_override(&c.name.name) } else { None };
        let value = match overridden {
            Some(v) => Some(v),
            None => self.eval_dim_in(module, comp, &c.value)?.value,
        };
        let mut symbol = self.fresh_symbol(c.name.name.as_str());
        symbol.value = value;
        Some(Dim::symbol(symbol, value))
    }
}

fn mentions_enum(ty: &Ty, id: EnumId) -> bool {
    match ty {
        Ty::Enum(e) => *e == id,
        Ty::Seq(t) => mentions_enum(t, id),
        Ty::Tuple(ts) => ts.iter().any(|t| mentions_enum(t, id)),
        _ => false,
    }
}

/// Name lookup for constant expressions inside a component (or at top level).
pub(crate) struct ComponentScope<'c, 'm> {
    pub ck: &'c mut Checker<'m>,
    pub module: usize,
    pub comp: Option<ComponentId>,
}

impl DimScope for ComponentScope<'_, '_> {
    fn lookup_dim(&mut self, name: &ast::Ident) -> Result<Dim, Box<Diagnostic>> {
        if let Some((n, dim, def)) = self.ck.network_scope.iter().find(|(n, ..)| *n == name.name).cloned() {
            self.ck.reference(name.span, def, hyper_hover(&n, dim.value));
            return Ok(dim);
        }
        if let Some(comp) = self.comp {
            let info = &self.ck.components[comp.0 as usize];
            if let Some(&i) = info.hyperparams.get(&name.name) {
                let hp = &self.ck.program.components[comp.0 as usize].hyperparams[i];
                let dim = Dim::symbol(hp.symbol.clone(), hp.value);
                let (def, hover) = (hp.span, hyper_hover(&hp.name, hp.value));
                self.ck.reference(name.span, def, hover);
                return Ok(dim);
            }
            if let Some((dim, def)) = info.consts.get(&name.name).cloned() {
                self.ck.reference(name.span, def, const_hover(&name.name, &dim));
                return Ok(dim);
            }
            if info.params.contains_key(&name.name) || info.fns.contains_key(&name.name) {
                return Err(Box::new(
                    Diagnostic::new(
                        Code::NotConstant,
                        name.span,
                        format!("`{}` is not a compile-time integer", name.name),
                    )
                    .with_primary("not a hyperparameter or constant"),
                ));
            }
        }
        let global = self.ck.lookup_global(self.module, &name.name);
        if global.is_none() && self.ck.body_locals.contains(&name.name) {
            self.ck.body_locals_named.push(name.name.clone());
            return Err(Box::new(
                Diagnostic::new(
                    Code::NotConstant,
                    name.span,
                    format!("`{}` is a run-time value, not a compile-time constant", name.name),
                )
                .with_primary("a variable")
                .with_note("dimensions and the counts of `split` and `top_k` are built from integer literals, hyperparameters and `const`s"),
            ));
        }
        match global {
            Some((Global::Const(dim, def), _)) => {
                self.ck.reference(name.span, def, const_hover(&name.name, &dim));
                Ok(dim)
            }
            // Already reported where it was defined; an empty message is dropped.
            Some((Global::Failed, _)) => Err(Box::new(Diagnostic::new(Code::NotConstant, name.span, ""))),
            Some((_, def)) => Err(Box::new(
                Diagnostic::new(Code::NotConstant, name.span, format!("`{}` is not a compile-time integer", name.name))
                    .with_primary("not a hyperparameter or constant")
                    .with_label(def, "defined here"),
            )),
            None => {
                let mut candidates: Vec<String> = self.ck.modules[self.module].scope.keys().cloned().collect();
                if let Some(comp) = self.comp {
                    candidates.extend(self.ck.components[comp.0 as usize].hyperparams.keys().cloned());
                    candidates.extend(self.ck.components[comp.0 as usize].consts.keys().cloned());
                }
                let mut d = Diagnostic::new(Code::UnknownName, name.span, format!("unknown name `{}`", name.name))
                    .with_primary("not a hyperparameter or constant in scope");
                if let Some(s) = suggest(&name.name, candidates.iter().map(String::as_str)) {
                    d = d.with_suggestion(s);
                }
                Err(Box::new(d))
            }
        }
    }
}

/// What hover shows for a hyperparameter: `hidden: int = 128`.
pub(crate) fn hyper_hover(name: &str, value: Option<i64>) -> String {
    match value {
        Some(v) => format!("{name}: int = {v}"),
        None => format!("{name}: int"),
    }
}

pub(crate) fn const_hover(name: &str, dim: &Dim) -> String {
    match dim.value {
        Some(v) => format!("const {name}: int = {v}"),
        None => format!("const {name}: int"),
    }
}
