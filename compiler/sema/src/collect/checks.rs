//! Whole-program checks after the bodies: entry points, unused names, unknown `-D`
//! overrides, and the document symbols of the main file.

use amp_diagnostics::{Code, Diagnostic, FileId, Span};
use amp_grammar::ast::{self, ComponentKind, ItemKind, MemberKind};

use super::*;

impl Checker<'_> {
    /// Where and what to insert for a missing `loss`: before the model's closing `}`,
    /// `fn loss(x: T) -> f32 { cross_entropy(forward(x), x.label) }` with `forward`'s input
    /// type and the record's `int` field (`label` first).
    fn loss_insertion(&self, id: ComponentId, forward: Option<&FnDef>) -> Option<(Span, String)> {
        let info = self.components.get(id.0 as usize)?;
        let item = info.item.items.get(info.item_index)?;
        let end = item.span.end.checked_sub(1)?;
        let at = Span::new(item.span.file, end as usize, end as usize);
        let input = forward.filter(|f| f.params.len() == 1).map(|f| &f.locals[f.params[0].0 as usize].ty);
        let ty = input.map_or_else(|| "Input".to_string(), |t| self.ty_str(t));
        let label = match input {
            Some(Ty::Record(r)) => {
                let ints = self.program.records[r.0 as usize].fields.iter().filter(|f| f.ty == Ty::Int);
                let ints: Vec<&str> = ints.map(|f| f.name.as_str()).collect();
                ints.iter().find(|n| **n == "label").or(ints.first()).map_or("label", |n| n).to_string()
            }
            _ => "label".to_string(),
        };
        Some((at, format!("    fn loss(x: {ty}) -> f32 {{ cross_entropy(forward(x), x.{label}) }}\n")))
    }

    // ------------------------------------------------------------ whole-program checks

    pub(super) fn check_entry_points(&mut self) {
        for &id in &self.program.models.clone() {
            let def = &self.program.components[id.0 as usize];
            let name_span = def.span;
            let name = def.name.clone();
            let forward = def.fn_named("forward").map(|i| def.fns[i].clone());
            let loss = def.fn_named("loss").map(|i| def.fns[i].clone());
            match &forward {
                None => self.error(
                    Diagnostic::new(
                        Code::MissingForward,
                        name_span,
                        format!("model `{name}` has no `forward` function"),
                    )
                    .with_primary("this model cannot run")
                    .with_help("add `fn forward(x: Input) -> T { ... }`"),
                ),
                Some(f) if f.params.len() != 1 => self.error(
                    Diagnostic::new(
                        Code::EntryPointSignature,
                        f.span,
                        "`forward` must take exactly one argument, the input instance",
                    )
                    .with_primary(format!("takes {}", f.params.len())),
                ),
                Some(_) => {}
            }
            match &loss {
                None => {
                    let fix = self.loss_insertion(id, forward.as_ref());
                    let mut d =
                        Diagnostic::new(Code::MissingLoss, name_span, format!("model `{name}` has no `loss` function"))
                            .with_primary("this model cannot be trained")
                            .with_help("add `fn loss(x: Input) -> f32 { cross_entropy(forward(x), x.label) }`");
                    if let Some((at, text)) = fix {
                        d = d.with_insertion(at, text);
                    }
                    self.error(d)
                }
                Some(l) => {
                    if l.params.len() != 1 {
                        self.error(
                            Diagnostic::new(
                                Code::EntryPointSignature,
                                l.span,
                                "`loss` must take exactly one argument, the input instance",
                            )
                            .with_primary(format!("takes {}", l.params.len())),
                        );
                    } else if let Some(f) = forward.as_ref().filter(|f| f.params.len() == 1) {
                        let lt = &l.locals[l.params[0].0 as usize];
                        let ft = &f.locals[f.params[0].0 as usize];
                        if !lt.ty.fits(&ft.ty) {
                            let (ls, fs) = (self.ty_str(&lt.ty), self.ty_str(&ft.ty));
                            self.error(
                                Diagnostic::new(
                                    Code::EntryPointSignature,
                                    lt.span,
                                    "`loss` and `forward` must take the same input type",
                                )
                                .with_primary(format!("`loss` takes {ls}"))
                                .with_label(ft.span, format!("`forward` takes {fs}")),
                            );
                        }
                    }
                    if !l.ret.fits(&Ty::scalar()) {
                        let shown = self.ty_str(&l.ret);
                        self.error(
                            Diagnostic::new(
                                Code::EntryPointSignature,
                                l.span,
                                format!("`loss` must return `f32`, not `{shown}`"),
                            )
                            .with_primary("the loss is a scalar")
                            .with_help("reduce it with `cross_entropy`, `mse`, `sum` or `mean`"),
                        );
                    }
                }
            }
        }
    }

    /// E0310 on the first parameter with which a model's parameters go over
    /// `amp_ir::limits`, counted without expanding arrays: `ampc check` refuses what the
    /// lowering and the runtime could not hold.
    pub(super) fn check_model_sizes(&mut self) {
        for &id in &self.program.models.clone() {
            let def = &self.program.components[id.0 as usize];
            let mut total = crate::params::ParamCount::default();
            let mut found = None;
            for p in &def.params {
                let Some(count) = self.program.count_params(&p.instance) else { break };
                total = total.plus(count);
                if let Some(why) = total.over_limit() {
                    found = Some((p.span, p.name.clone(), why));
                    break;
                }
            }
            if let Some((span, name, why)) = found {
                let mut d = Diagnostic::new(
                    Code::TooLarge,
                    span,
                    format!("model `{}` is over the size limits at `{name}`", def.name),
                )
                .with_primary(format!("with this parameter the model has {why}"))
                .with_note("the limits are in docs/limits.md");
                let set: Vec<String> = self.overrides.iter().map(|o| format!("-D {}={}", o.0, o.1)).collect();
                if !set.is_empty() {
                    d = d.with_note(format!("set on the command line: {}", set.join(", ")));
                }
                self.error(d);
            }
        }
    }

    pub(super) fn warn_unused(&mut self) {
        for c in 0..self.components.len() {
            if self.modules[self.components[c].module].is_std {
                continue;
            }
            for (i, used) in self.components[c].params_used.clone().into_iter().enumerate() {
                let p = &self.program.components[c].params[i];
                if !used && !p.name.starts_with('_') {
                    let (name, span) = (p.name.clone(), p.span);
                    self.error(
                        Diagnostic::new(Code::UnusedParam, span, format!("parameter `{name}` is never used"))
                            .with_primary("never used by any function")
                            .with_help("remove it, or prefix its name with `_` to keep it"),
                    );
                }
            }
        }
        for m in 0..self.modules.len() {
            if self.modules[m].is_std {
                continue;
            }
            let unused: Vec<ast::Ident> =
                self.modules[m].imports.iter().filter(|i| !i.used).map(|i| i.name.clone()).collect();
            for name in unused {
                self.error(
                    Diagnostic::new(Code::UnusedImport, name.span, format!("unused import `{}`", name.name))
                        .with_primary("never used"),
                );
            }
        }
    }

    pub(super) fn report_unknown_overrides(&mut self, main: FileId) {
        let unknown: Vec<(String, i64)> = self.overrides.iter().filter(|o| !o.2).map(|o| (o.0.clone(), o.1)).collect();
        for (name, value) in unknown {
            let mut candidates: Vec<String> = Vec::new();
            for &m in &self.program.models {
                candidates.extend(self.program.components[m.0 as usize].hyperparams.iter().map(|h| h.name.clone()));
            }
            let mut d = Diagnostic::new(
                Code::UnknownOverride,
                Span::new(main, 0, 0),
                format!("`-D {name}={value}` does not name a hyperparameter or constant of this program"),
            )
            .with_primary("given on the command line");
            if !candidates.is_empty() {
                d = d.with_note(format!("the hyperparameters are: {}", candidates.join(", ")));
            }
            if let Some(s) = suggest(&name, candidates.iter().map(String::as_str)) {
                d = d.with_help(format!("did you mean `{s}`?"));
            }
            self.error(d);
        }
    }

    pub(super) fn collect_symbols(&mut self) {
        let Some(main) = self.modules.iter().position(|m| m.is_main) else {
            return;
        };
        let ast = self.modules[main].ast.clone();
        let mut out = Vec::new();
        for item in &ast.items {
            let push = |out: &mut Vec<SymbolInfo>, name: &ast::Ident, kind, span, container: Option<&str>| {
                out.push(SymbolInfo {
                    name: name.name.clone(),
                    kind,
                    span,
                    name_span: name.span,
                    container: container.map(str::to_string),
                })
            };
            match &item.kind {
                ItemKind::Record(r) => {
                    push(&mut out, &r.name, SymbolKind::Record, item.span, None);
                    for f in &r.fields {
                        push(&mut out, &f.name, SymbolKind::Field, f.span, Some(&r.name.name));
                    }
                }
                ItemKind::Enum(e) => {
                    push(&mut out, &e.name, SymbolKind::Enum, item.span, None);
                    for v in &e.variants {
                        push(&mut out, &v.name, SymbolKind::Variant, v.span, Some(&e.name.name));
                    }
                }
                ItemKind::Const(c) => push(&mut out, &c.name, SymbolKind::Const, item.span, None),
                ItemKind::Network(n) => push(&mut out, &n.name, SymbolKind::Network, item.span, None),
                ItemKind::Component(c) => {
                    let kind = if c.kind == ComponentKind::Model { SymbolKind::Model } else { SymbolKind::Layer };
                    push(&mut out, &c.name, kind, item.span, None);
                    for hp in &c.hyperparams {
                        push(&mut out, &hp.name, SymbolKind::HyperParam, hp.span, Some(&c.name.name));
                    }
                    for m in &c.members {
                        match &m.kind {
                            MemberKind::Param { name, .. } => {
                                push(&mut out, name, SymbolKind::Param, m.span, Some(&c.name.name))
                            }
                            MemberKind::Fn(f) => {
                                push(&mut out, &f.name, SymbolKind::Function, m.span, Some(&c.name.name))
                            }
                            MemberKind::Const(k) => {
                                push(&mut out, &k.name, SymbolKind::Const, m.span, Some(&c.name.name))
                            }
                            MemberKind::Error => {}
                        }
                    }
                }
                ItemKind::Use(_) | ItemKind::Broken(_) | ItemKind::Error => {}
            }
        }
        self.program.symbols = out;
    }
}
