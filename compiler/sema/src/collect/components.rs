//! Layers and models: hyperparameters, `param` instances (with layer instantiation by
//! substitution) and function signatures.

use crate::shape::{Dim, Symbol};
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self, ComponentKind, ItemKind, MemberKind};
use std::sync::Arc;

use super::*;

impl Checker<'_> {
    // ------------------------------------------------------------ components

    pub(super) fn declare_hyperparams(&mut self, id: ComponentId) {
        let info = &self.components[id.0 as usize];
        let (module, item, index) = (info.module, info.item.clone(), info.item_index);
        let ItemKind::Component(c) = &item.items[index].kind else {
            return;
        };
        let is_model = c.kind == ComponentKind::Model && self.modules[module].is_main;
        for hp in &c.hyperparams {
            if self.components[id.0 as usize].hyperparams.contains_key(&hp.name.name) {
                let prev = self.program.components[id.0 as usize]
                    .hyperparams
                    .iter()
                    .find(|h| h.name == hp.name.name)
                    .map(|h| h.span);
                let mut d = Diagnostic::new(
                    Code::DuplicateDefinition,
                    hp.name.span,
                    format!("hyperparameter `{}` is defined twice", hp.name.name),
                )
                .with_primary("redefined here");
                if let Some(prev) = prev {
                    d = d.with_label(prev, "first defined here");
                }
                self.error(d);
                continue;
            }
            let ty = self.resolve_type(module, Some(id), &hp.ty);
            if ty != Ty::Int && !ty.is_error() {
                let shown = self.ty_str(&ty);
                self.error(
                    Diagnostic::new(
                        Code::InvalidTypeHere,
                        hp.ty.span,
                        format!("hyperparameters must be `int`, not `{shown}`"),
                    )
                    .with_primary("not `int`"),
                );
            }
            let default = hp.default.as_ref().and_then(|d| self.eval_dim_in(module, Some(id), d));
            let value = if is_model {
                match self.take_override(&hp.name.name) {
                    Some(v) => Some(v),
                    None => match (&hp.default, &default) {
                        (Some(_), Some(d)) => d.value,
                        (Some(_), None) => None,
                        (None, _) => {
                            self.error(
                                Diagnostic::new(
                                    Code::HyperparameterWithoutValue,
                                    hp.name.span,
                                    format!("hyperparameter `{}` has no value", hp.name.name),
                                )
                                .with_primary("no default and no override")
                                .with_help(format!(
                                    "give it a default (`{}: int = ...`) or pass `-D {}=...`",
                                    hp.name.name, hp.name.name
                                )),
                            );
                            None
                        }
                    },
                }
            } else {
                None
            };
            let mut symbol = self.fresh_symbol(hp.name.name.as_str());
            symbol.value = value;
            let comp = &mut self.components[id.0 as usize];
            comp.hyperparams.insert(hp.name.name.clone(), comp.defaults.len());
            comp.defaults.push(default);
            self.program.components[id.0 as usize].hyperparams.push(HyperParamDef {
                name: hp.name.name.clone(),
                symbol,
                value,
                span: hp.name.span,
            });
        }
        for member in &c.members {
            if let MemberKind::Const(k) = &member.kind {
                if let Some(dim) = self.eval_const(module, Some(id), k) {
                    if let Some(prev) = self.member_name_span(id, &k.name.name) {
                        self.duplicate_member(&k.name, prev);
                        continue;
                    }
                    self.components[id.0 as usize].consts.insert(k.name.name.clone(), (dim, k.name.span));
                }
            }
        }
    }

    pub(super) fn member_name_span(&self, id: ComponentId, name: &str) -> Option<Span> {
        let info = &self.components[id.0 as usize];
        let def = &self.program.components[id.0 as usize];
        if let Some(&i) = info.hyperparams.get(name) {
            return def.hyperparams.get(i).map(|h| h.span);
        }
        if let Some(&i) = info.params.get(name) {
            return def.params.get(i as usize).map(|p| p.span);
        }
        if let Some((_, span)) = info.consts.get(name) {
            return Some(*span);
        }
        if let Some(&i) = info.fns.get(name) {
            return def.fns.get(i as usize).map(|f| f.span);
        }
        None
    }

    pub(super) fn duplicate_member(&mut self, name: &ast::Ident, prev: Span) {
        self.error(
            Diagnostic::new(Code::DuplicateDefinition, name.span, format!("`{}` is defined twice", name.name))
                .with_primary("redefined here")
                .with_label(prev, "first defined here"),
        );
    }

    pub(super) fn declare_params(&mut self, id: ComponentId) {
        let info = &self.components[id.0 as usize];
        let (module, item, index) = (info.module, info.item.clone(), info.item_index);
        let ItemKind::Component(c) = &item.items[index].kind else {
            return;
        };
        for member in &c.members {
            let MemberKind::Param { name, init } = &member.kind else {
                continue;
            };
            let Some(instance) = self.eval_instance(module, Some(id), init) else {
                self.components[id.0 as usize].failed_params.insert(name.name.clone());
                continue;
            };
            if let Some(prev) = self.member_name_span(id, &name.name) {
                self.duplicate_member(name, prev);
                continue;
            }
            let comp = &mut self.components[id.0 as usize];
            comp.params.insert(name.name.clone(), comp.params_used.len() as u32);
            comp.params_used.push(false);
            self.program.components[id.0 as usize].params.push(ParamDef {
                name: name.name.clone(),
                instance: Arc::new(instance),
                span: name.span,
                doc: member.doc.clone(),
            });
        }
    }

    /// Builds the instance a `param` initialiser describes.
    pub(crate) fn eval_instance(
        &mut self,
        module: usize,
        comp: Option<ComponentId>,
        init: &ast::Expr,
    ) -> Option<Instance> {
        match &init.kind {
            ast::ExprKind::Paren(inner) => self.eval_instance(module, comp, inner),
            ast::ExprKind::Repeat(elem, len) => {
                let elem = self.eval_instance(module, comp, elem)?;
                let len_dim = self.eval_dim_in(module, comp, len)?;
                if !self.check_positive(&len_dim, len.span, "parameter array length") {
                    return None;
                }
                Some(Instance::Array { elem: Arc::new(elem), len: len_dim })
            }
            ast::ExprKind::Call(callee, args) => {
                let ast::ExprKind::Name(name) = &callee.kind else {
                    return self.invalid_param(init.span);
                };
                // A built-in function computes values; it declares no parameters. Said
                // before its arguments are evaluated, which need not be constants.
                if Builtin::from_name(&name.name).is_some() && !self.modules[module].scope.contains_key(&name.name) {
                    self.error(
                        Diagnostic::new(
                            Code::InvalidParam,
                            init.span,
                            format!("`{}` is a built-in function, not a layer", name.name),
                        )
                        .with_primary("declares no parameters")
                        .with_help(
                            "declare a `Linear`, `Embedding`, `LayerNorm` or layer here and apply the function in `fn` bodies",
                        ),
                    );
                    return None;
                }
                let mut dims = Vec::new();
                for a in args {
                    dims.push((self.eval_dim_in(module, comp, a)?, a.span));
                }
                match name.name.as_str() {
                    "LayerNorm" => {
                        let [(d, span)] = &dims[..] else {
                            self.error(
                                Diagnostic::new(
                                    Code::ArityMismatch,
                                    init.span,
                                    format!("`LayerNorm` takes 1 argument, {} given", dims.len()),
                                )
                                .with_primary("expected LayerNorm(dim)"),
                            );
                            return None;
                        };
                        if !self.check_positive(d, *span, "parameter dimension") {
                            return None;
                        }
                        Some(Instance::LayerNorm { dim: d.clone() })
                    }
                    "Linear" | "Embedding" => {
                        if dims.len() != 2 {
                            let what = if name.name == "Linear" { "Linear(in, out)" } else { "Embedding(count, dim)" };
                            self.error(
                                Diagnostic::new(
                                    Code::ArityMismatch,
                                    init.span,
                                    format!("`{}` takes 2 arguments, {} given", name.name, dims.len()),
                                )
                                .with_primary(format!("expected {what}")),
                            );
                            return None;
                        }
                        let mut ok = true;
                        for (d, span) in &dims {
                            ok &= self.check_positive(d, *span, "parameter dimension");
                        }
                        if !ok {
                            return None;
                        }
                        let (a, b) = (dims[0].0.clone(), dims[1].0.clone());
                        Some(if name.name == "Linear" {
                            Instance::Linear { input: a, output: b }
                        } else {
                            Instance::Embedding { count: a, dim: b }
                        })
                    }
                    other => match self.lookup_global(module, other) {
                        Some((Global::Component(layer), def))
                            if self.program.components[layer.0 as usize].kind == ComponentKind::Layer =>
                        {
                            self.reference(name.span, def, format!("layer {other}"));
                            self.instantiate_layer(comp, layer, dims, init.span)
                        }
                        Some((Global::Failed, _)) => None,
                        Some((_, def)) => {
                            self.error(
                                Diagnostic::new(Code::InvalidParam, name.span, format!("`{other}` is not a layer"))
                                    .with_primary(
                                        "parameters are `Linear`, `Embedding`, `LayerNorm`, a `layer`, or an array of them",
                                    )
                                    .with_label(def, "defined here"),
                            );
                            None
                        }
                        None => {
                            let mut candidates: Vec<String> =
                                vec!["Linear".into(), "Embedding".into(), "LayerNorm".into()];
                            candidates.extend(self.modules[module].scope.keys().cloned());
                            let mut d =
                                Diagnostic::new(Code::UnknownName, name.span, format!("unknown layer `{other}`"))
                                    .with_primary("not found in this scope");
                            match suggest(other, candidates.iter().map(String::as_str)) {
                                Some(s) => d = d.with_suggestion(s),
                                None => {
                                    if ["Mlp", "GruCell", "LstmCell", "TreeLstmCell"].contains(&other) {
                                        let top = Span::new(self.modules[module].file, 0, 0);
                                        d = d
                                            .with_help(format!("import it with `use std::nn::{other};`"))
                                            .with_insertion(top, format!("use std::nn::{other};\n"));
                                    }
                                }
                            }
                            self.error(d);
                            None
                        }
                    },
                }
            }
            ast::ExprKind::Error => None,
            _ => self.invalid_param(init.span),
        }
    }

    pub(super) fn invalid_param(&mut self, span: Span) -> Option<Instance> {
        self.error(Diagnostic::new(Code::InvalidParam, span, "invalid parameter declaration").with_primary(
            "expected `Linear(in, out)`, `Embedding(n, d)`, `LayerNorm(d)`, a layer, or `[Layer(...); n]`",
        ));
        None
    }

    pub(super) fn instantiate_layer(
        &mut self,
        comp: Option<ComponentId>,
        layer: ComponentId,
        given: Vec<(Dim, Span)>,
        span: Span,
    ) -> Option<Instance> {
        let name = self.program.components[layer.0 as usize].name.clone();
        let total = self.program.components[layer.0 as usize].hyperparams.len();
        let defaults = self.components[layer.0 as usize].defaults.clone();
        let required = defaults.iter().rposition(|d| d.is_none()).map_or(0, |i| i + 1);
        if given.len() > total || given.len() < required {
            let expected = if required == total { format!("{total}") } else { format!("{required} to {total}") };
            self.error(
                Diagnostic::new(
                    Code::ArityMismatch,
                    span,
                    format!("layer `{name}` takes {expected} arguments, {} given", given.len()),
                )
                .with_primary("wrong number of arguments")
                .with_label(self.program.components[layer.0 as usize].span, "layer defined here"),
            );
            return None;
        }
        let symbols: Vec<Symbol> =
            self.program.components[layer.0 as usize].hyperparams.iter().map(|h| h.symbol.clone()).collect();
        let mut args: Vec<Dim> = given.iter().map(|(d, _)| d.clone()).collect();
        for default in defaults.iter().skip(args.len()) {
            let Some(default) = default else { return None };
            let bound = args.clone();
            let value =
                default.substitute(&|s| symbols.iter().position(|x| x == s).and_then(|i| bound.get(i).cloned()));
            args.push(value);
        }
        let instance = Instance::Layer { layer, args };
        // Every dimension inside must be positive for these arguments.
        let mut problems = Vec::new();
        let mut stack: Vec<ComponentId> = comp.into_iter().collect();
        self.collect_non_positive(&instance, &mut problems, &mut stack, 0);
        if let Some(problem) = problems.into_iter().next() {
            self.error(
                Diagnostic::new(
                    Code::NonPositiveDimension,
                    span,
                    format!("this instance of `{name}` has a non-positive dimension"),
                )
                .with_primary(problem)
                .with_note("every tensor dimension must be at least 1"),
            );
            return None;
        }
        Some(instance)
    }

    /// Expands an instance's parameters and lists dimensions that are known and <= 0.
    pub(super) fn collect_non_positive(
        &self,
        instance: &Instance,
        out: &mut Vec<String>,
        stack: &mut Vec<ComponentId>,
        depth: usize,
    ) {
        if depth > 32 {
            return;
        }
        let check = |d: &Dim, what: &str, out: &mut Vec<String>| {
            if let Some(v) = d.value.filter(|v| *v <= 0) {
                out.push(format!("{what} would be {v}"));
            }
        };
        match instance {
            Instance::Linear { input, output } => {
                check(input, "a Linear input size", out);
                check(output, "a Linear output size", out);
            }
            Instance::Embedding { count, dim } => {
                check(count, "an Embedding size", out);
                check(dim, "an Embedding dimension", out);
            }
            Instance::LayerNorm { dim } => check(dim, "a LayerNorm dimension", out),
            Instance::Array { elem, len } => {
                check(len, "an array length", out);
                self.collect_non_positive(elem, out, stack, depth + 1);
            }
            Instance::Layer { layer, args } => {
                if stack.contains(layer) {
                    return;
                }
                stack.push(*layer);
                let def = &self.program.components[layer.0 as usize];
                for p in &def.params {
                    let inner = substitute_instance(&p.instance, &def.hyperparams, args);
                    self.collect_non_positive(&inner, out, stack, depth + 1);
                }
                stack.pop();
            }
        }
    }

    pub(super) fn declare_signatures(&mut self, id: ComponentId) {
        let info = &self.components[id.0 as usize];
        let (module, item, index) = (info.module, info.item.clone(), info.item_index);
        let ItemKind::Component(c) = &item.items[index].kind else {
            return;
        };
        for member in &c.members {
            let MemberKind::Fn(f) = &member.kind else {
                continue;
            };
            if let Some(prev) = self.member_name_span(id, &f.name.name) {
                self.duplicate_member(&f.name, prev);
                continue;
            }
            let mut locals: Vec<LocalDef> = Vec::new();
            let mut params = Vec::new();
            for p in &f.params {
                let ty = self.resolve_type(module, Some(id), &p.ty);
                let mut name = p.name.name.clone();
                if let Some(prev) = locals.iter().find(|l| l.name == p.name.name && l.name != "_") {
                    let prev = prev.span;
                    // The body's uses resolve to the first declaration; the duplicate is
                    // kept for the arity but nameless, so neither is reported unused.
                    name = "_".to_string();
                    self.error(
                        Diagnostic::new(
                            Code::DuplicateDefinition,
                            p.name.span,
                            format!("parameter `{}` is declared twice", p.name.name),
                        )
                        .with_primary("redeclared here")
                        .with_label(prev, "first declared here"),
                    );
                }
                params.push(LocalId(locals.len() as u32));
                locals.push(LocalDef { name, ty, span: p.name.span, mutable: false });
            }
            let ret = match &f.ret {
                Some(t) => self.resolve_type(module, Some(id), t),
                None => Ty::unit(),
            };
            let comp = &mut self.components[id.0 as usize];
            comp.fns.insert(f.name.name.clone(), self.program.components[id.0 as usize].fns.len() as u32);
            self.program.components[id.0 as usize].fns.push(FnDef {
                name: f.name.name.clone(),
                params,
                ret,
                body: Block { stmts: Vec::new(), tail: None, span: f.body.span },
                locals,
                span: f.name.span,
                doc: member.doc.clone(),
                recursive: false,
            });
        }
    }
}

/// Rewrites a layer's instance (in the layer's symbols) for concrete arguments.
pub(crate) fn substitute_instance(instance: &Instance, hyperparams: &[HyperParamDef], args: &[Dim]) -> Instance {
    let map = |s: &Symbol| hyperparams.iter().position(|h| h.symbol == *s).and_then(|i| args.get(i).cloned());
    substitute_instance_with(instance, &map)
}

pub(crate) fn substitute_instance_with(instance: &Instance, map: &dyn Fn(&Symbol) -> Option<Dim>) -> Instance {
    match instance {
        Instance::Linear { input, output } => {
            Instance::Linear { input: input.substitute(map), output: output.substitute(map) }
        }
        Instance::Embedding { count, dim } => {
            Instance::Embedding { count: count.substitute(map), dim: dim.substitute(map) }
        }
        Instance::LayerNorm { dim } => Instance::LayerNorm { dim: dim.substitute(map) },
        Instance::Layer { layer, args } => {
            Instance::Layer { layer: *layer, args: args.iter().map(|a| a.substitute(map)).collect() }
        }
        Instance::Array { elem, len } => {
            Instance::Array { elem: Arc::new(substitute_instance_with(elem, map)), len: len.substitute(map) }
        }
    }
}

/// Rewrites a type written in a layer's symbols for concrete arguments.
pub(crate) fn substitute_ty(ty: &Ty, map: &dyn Fn(&Symbol) -> Option<Dim>) -> Ty {
    match ty {
        Ty::Tensor(shape) => Ty::Tensor(shape.iter().map(|d| d.substitute(map)).collect()),
        Ty::Seq(t) => Ty::Seq(Box::new(substitute_ty(t, map))),
        Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| substitute_ty(t, map)).collect()),
        Ty::Instance(i) => Ty::Instance(Arc::new(substitute_instance_with(i, map))),
        other => other.clone(),
    }
}
