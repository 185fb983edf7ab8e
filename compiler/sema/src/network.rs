//! `network` blocks: layer graphs with recurrent and skip edges, for rollout analysis.
//! Each node applies its layer to the concatenation of its sources; a source may be the
//! node itself or a later node (a recurrent edge, delayed by the rollout).

use crate::collect::{Checker, Global};
use crate::shape::{shape_with_values, Dim, Symbol};
use crate::typed::*;
use amp_diagnostics::{Code, Diagnostic, Span};
use amp_grammar::ast::{self, ItemKind, NetStmtKind};

impl Checker<'_> {
    pub(crate) fn check_networks(&mut self, module: usize) {
        let ast = self.modules[module].ast.clone();
        for item in &ast.items {
            let ItemKind::Network(n) = &item.kind else {
                continue;
            };
            let Some((Global::Network(index), _)) = self.modules[module].scope.get(&n.name.name).cloned() else {
                continue;
            };
            self.check_network(module, index, n);
            self.network_scope.clear();
        }
    }

    fn check_network(&mut self, module: usize, index: usize, n: &ast::NetworkItem) {
        let is_main = self.modules[module].is_main;
        let mut hyperparams = Vec::new();
        for hp in &n.hyperparams {
            let default = hp.default.as_ref().and_then(|d| self.eval_dim_in(module, None, d));
            let value =
                if is_main { self.take_override(&hp.name.name) } else { None }.or(default.and_then(|d| d.value));
            if value.is_none() && hp.default.is_none() {
                self.error(
                    Diagnostic::new(
                        Code::HyperparameterWithoutValue,
                        hp.name.span,
                        format!("hyperparameter `{}` has no value", hp.name.name),
                    )
                    .with_primary("no default and no override"),
                );
            }
            let mut symbol: Symbol = self.fresh_symbol(hp.name.name.as_str());
            symbol.value = value;
            self.network_scope.push((hp.name.name.clone(), Dim::symbol(symbol.clone(), value), hp.name.span));
            hyperparams.push(HyperParamDef { name: hp.name.name.clone(), symbol, value, span: hp.name.span });
        }
        for kw in &n.bad_keywords {
            self.error(
                Diagnostic::new(Code::NetworkError, kw.span, format!("`{}` does not start a network line", kw.name))
                    .with_primary("expected `input`, `node` or `output`")
                    .with_note("write `input x: f32[d];`, `node h = Linear(a, b) from x, h;` or `output y = Linear(b, c) from h;`"),
            );
        }
        // Names first, so that sources may refer forward (recurrent edges).
        let mut names: Vec<(String, Span)> = Vec::new();
        for s in &n.stmts {
            if let Some((_, prev)) = names.iter().find(|(x, _)| *x == s.name.name) {
                let prev = *prev;
                self.error(
                    Diagnostic::new(
                        Code::DuplicateDefinition,
                        s.name.span,
                        format!("`{}` is defined twice in this network", s.name.name),
                    )
                    .with_primary("redefined here")
                    .with_label(prev, "first defined here"),
                );
            }
            names.push((s.name.name.clone(), s.name.span));
        }
        let mut nodes: Vec<NetworkNode> = Vec::new();
        // Nodes with an unknown source (reported): their widths cannot be judged.
        let mut incomplete: Vec<bool> = Vec::new();
        for s in &n.stmts {
            let mut unknown_source = false;
            let mut node = NetworkNode {
                name: s.name.name.clone(),
                kind: s.kind,
                instance: None,
                activation: None,
                width: None,
                sources: Vec::new(),
                source_spans: Vec::new(),
                span: s.span,
            };
            match s.kind {
                NetStmtKind::Input => {
                    let ty = s.ty.as_ref().map_or(Ty::Error, |t| self.resolve_type(module, None, t));
                    match ty {
                        Ty::Tensor(shape) if shape.len() == 1 => node.width = Some(shape[0].clone()),
                        Ty::Error => {}
                        other => {
                            let shown = self.ty_str(&other);
                            let span = s.ty.as_ref().map_or(s.span, |t| t.span);
                            self.error(
                                Diagnostic::new(
                                    Code::NetworkError,
                                    span,
                                    format!("network inputs are vectors, not `{shown}`"),
                                )
                                .with_primary("expected `f32[d]`"),
                            );
                        }
                    }
                }
                NetStmtKind::Node | NetStmtKind::Output => {
                    for src in &s.sources {
                        match names.iter().position(|(x, _)| *x == src.name) {
                            Some(i) => {
                                let def = names[i].1;
                                self.reference(src.span, def, format!("network node {}", src.name));
                                node.sources.push(i);
                                node.source_spans.push(src.span);
                            }
                            None => {
                                unknown_source = true;
                                self.error(
                                    Diagnostic::new(
                                        Code::NetworkError,
                                        src.span,
                                        format!("`{}` is not a node of this network", src.name),
                                    )
                                    .with_primary("unknown source"),
                                );
                            }
                        }
                    }
                    if let Some(layer) = &s.layer {
                        self.network_layer(module, layer, &mut node);
                    }
                }
            }
            nodes.push(node);
            incomplete.push(unknown_source);
        }
        // Widths: a node's input width is the sum of its sources' output widths.
        for i in 0..nodes.len() {
            if incomplete[i] {
                continue;
            }
            let Some(inst) = nodes[i].instance.clone() else {
                continue;
            };
            let Some((input, _)) = self.instance_widths(&inst) else {
                continue;
            };
            let mut total = Some(Dim::constant(0));
            for &src in &nodes[i].sources {
                total = match (&total, &nodes[src].width) {
                    (Some(t), Some(w)) => Some(t.add(w)),
                    _ => None,
                };
            }
            if let Some(total) = total {
                if total != input && !nodes[i].sources.is_empty() {
                    let (want, got) = (
                        shape_with_values(std::slice::from_ref(&input)),
                        shape_with_values(std::slice::from_ref(&total)),
                    );
                    let names: Vec<&str> = nodes[i].sources.iter().map(|&s| nodes[s].name.as_str()).collect();
                    self.error(
                        Diagnostic::new(
                            Code::NetworkError,
                            nodes[i].span,
                            format!("node `{}` takes `{want}` but its sources give `{got}`", nodes[i].name),
                        )
                        .with_primary("widths do not add up")
                        .with_note(format!("the sources {} are concatenated", names.join(", "))),
                    );
                }
            }
        }
        if !n.stmts.iter().any(|s| s.kind == NetStmtKind::Output) && !n.stmts.is_empty() {
            self.error(
                Diagnostic::new(Code::NetworkError, n.name.span, format!("network `{}` has no `output`", n.name.name))
                    .with_primary("nothing to read out"),
            );
        }
        let def = &mut self.program.networks[index];
        def.hyperparams = hyperparams;
        def.nodes = nodes;
    }

    fn network_layer(&mut self, module: usize, layer: &ast::Expr, node: &mut NetworkNode) {
        let mut ctor = layer;
        if let ast::ExprKind::Call(f, args) = &layer.kind {
            if let (ast::ExprKind::Name(name), [inner]) = (&f.kind, &args[..]) {
                if let Some(b) = Builtin::from_name(&name.name).filter(|b| b.is_elementwise()) {
                    node.activation = Some(b);
                    ctor = inner;
                }
            }
        }
        let Some(inst) = self.eval_instance(module, None, ctor) else {
            return;
        };
        match self.instance_widths(&inst) {
            Some((_, out)) => {
                node.width = Some(out);
                node.instance = Some(std::sync::Arc::new(inst));
            }
            None => {
                let shown = self.instance_str(&inst);
                self.error(
                    Diagnostic::new(Code::NetworkError, ctor.span, format!("`{shown}` cannot be a network node"))
                        .with_primary("a node maps one vector to one vector")
                        .with_note("use `Linear(in, out)` or a layer whose `apply` takes and returns `f32[n]`"),
                );
            }
        }
    }

    /// (input width, output width) of an instance that maps a vector to a vector.
    fn instance_widths(&self, inst: &Instance) -> Option<(Dim, Dim)> {
        match inst {
            Instance::Linear { input, output } => Some((input.clone(), output.clone())),
            Instance::Layer { layer, args } => {
                let def = &self.program.components[layer.0 as usize];
                let f = &def.fns[def.fn_named("apply")?];
                let [p] = &f.params[..] else { return None };
                let map =
                    |s: &Symbol| def.hyperparams.iter().position(|h| h.symbol == *s).and_then(|i| args.get(i).cloned());
                let vector = |t: &Ty| match crate::collect::substitute_ty(t, &map) {
                    Ty::Tensor(s) if s.len() == 1 => Some(s[0].clone()),
                    _ => None,
                };
                Some((vector(&f.locals[p.0 as usize].ty)?, vector(&f.ret)?))
            }
            _ => None,
        }
    }
}
