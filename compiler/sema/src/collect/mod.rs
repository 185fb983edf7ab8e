//! The program-level passes of the checker: declare items, resolve imports, resolve
//! record and enum fields, evaluate constants and hyperparameters, build `param`
//! instances and function signatures, then check bodies (in `body/`), recursion, entry
//! points, networks and unused names.

use crate::consts::is_silent;
use crate::display::{instance_to_string, ty_to_string};
use crate::shape::{Dim, Symbol};
use crate::typed::*;
use crate::{Checked, Options};
use amp_diagnostics::{Code, Diagnostic, FileId, SourceMap, Span};
use amp_grammar::ast::{self, ComponentKind, ItemKind, MemberKind};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

mod checks;
mod components;
mod types;

pub(crate) use components::substitute_ty;
pub(crate) use types::{const_hover, hyper_hover};

/// A top-level name of a module.
#[derive(Clone, Debug)]
pub(crate) enum Global {
    Record(RecordId),
    Enum(EnumId),
    Component(ComponentId),
    Network(usize),
    Const(Dim, Span),
    /// An imported name: the target and the index of the import (to mark it used).
    Imported(Box<Global>, usize),
    /// A name whose definition failed and was reported (an unknown import, a constant
    /// that could not be evaluated). Uses resolve silently to an error, so the one
    /// mistake is not reported again at every use.
    Failed,
}

pub(crate) struct Import {
    pub name: ast::Ident,
    pub used: bool,
}

pub(crate) struct Module {
    pub file: FileId,
    pub ast: Rc<ast::SourceFileAst>,
    pub scope: HashMap<String, (Global, Span)>,
    pub imports: Vec<Import>,
    pub is_main: bool,
}

/// What body checking needs to know about a component besides its `ComponentDef`.
pub(crate) struct ComponentInfo {
    pub module: usize,
    pub item: Rc<ast::SourceFileAst>,
    pub item_index: usize,
    pub params: HashMap<String, u32>,
    pub hyperparams: HashMap<String, usize>,
    pub defaults: Vec<Option<Dim>>,
    pub consts: HashMap<String, (Dim, Span)>,
    pub fns: HashMap<String, u32>,
    pub params_used: Vec<bool>,
    /// `param`s whose declaration had an error: uses of them are not reported again.
    pub failed_params: std::collections::HashSet<String>,
}

pub(crate) struct Checker<'m> {
    pub map: &'m mut SourceMap,
    pub diags: Vec<Diagnostic>,
    pub program: Program,
    pub next_symbol: u32,
    pub modules: Vec<Module>,
    pub components: Vec<ComponentInfo>,
    pub overrides: Vec<(String, i64, bool)>,
    /// The hyperparameters of the `network` being checked, if any.
    pub network_scope: Vec<(String, Dim, Span)>,
    /// The variables in scope while a constant inside a function body is evaluated (a
    /// type annotation, `split(v, n)`): naming one is "not a constant", not "unknown".
    pub body_locals: Vec<String>,
    /// The variables of `body_locals` that a constant named, so they count as used.
    pub body_locals_named: Vec<String>,
}

/// Edit distance with adjacent transpositions (optimal string alignment), for "did you
/// mean" hints: a swapped pair (`Inptu` for `Input`) is one typo, not two.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back (for transpositions), one back, and the current one.
    let mut before: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 0..a.len() {
        let mut cur = vec![i + 1];
        for j in 0..b.len() {
            let cost = usize::from(a[i] != b[j]);
            let mut d = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                if let Some(t) = before.get(j - 1) {
                    d = d.min(t + 1);
                }
            }
            cur.push(d);
        }
        before = std::mem::replace(&mut prev, cur);
    }
    prev[b.len()]
}

/// The closest of `candidates` to `name`, if close enough to be a likely typo.
pub(crate) fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .filter(|c| *c != name && !c.is_empty())
        .map(|c| (edit_distance(name, c), c))
        // Replacing every character is no likeness (`z` and `n`), whatever the limit.
        .filter(|(d, c)| *d <= limit && *d < name.chars().count().max(c.chars().count()))
        .min()
        .map(|(_, c)| c.to_string())
}

impl<'m> Checker<'m> {
    pub(crate) fn run(map: &'m mut SourceMap, main: FileId, options: &Options) -> Checked {
        let text = map.get(main).map(|f| f.text.clone()).unwrap_or_default();
        let parsed = amp_grammar::parse(main, &text);
        let parse_errors = parsed.damaged.clone();
        let parse_count = parsed.diagnostics.len();
        let mut ck = Checker {
            map,
            diags: parsed.diagnostics,
            program: Program::default(),
            next_symbol: 0,
            modules: Vec::new(),
            components: Vec::new(),
            overrides: options.defines.iter().map(|(k, v)| (k.clone(), *v, false)).collect(),
            network_scope: Vec::new(),
            body_locals: Vec::new(),
            body_locals_named: Vec::new(),
        };
        ck.modules.push(Module {
            file: main,
            ast: Rc::new(parsed.ast),
            scope: HashMap::new(),
            imports: Vec::new(),
            is_main: true,
        });
        ck.declare(0);
        ck.resolve_imports(0);
        for m in 0..ck.modules.len() {
            ck.resolve_type_items(m);
        }
        for m in 0..ck.modules.len() {
            ck.eval_global_consts(m);
        }
        for c in 0..ck.components.len() {
            ck.declare_hyperparams(ComponentId(c as u32));
        }
        for c in 0..ck.components.len() {
            ck.declare_params(ComponentId(c as u32));
        }
        for c in 0..ck.components.len() {
            ck.declare_signatures(ComponentId(c as u32));
        }
        for c in 0..ck.components.len() {
            let id = ComponentId(c as u32);
            let calls = crate::body::check_component_bodies(&mut ck, id);
            crate::recursion::check_recursion(&mut ck, id, &calls);
        }
        for m in 0..ck.modules.len() {
            ck.check_networks(m);
        }
        ck.check_entry_points();
        ck.check_model_sizes();
        ck.warn_unused();
        ck.report_unknown_overrides(main);
        ck.drop_cascades_of_parse_errors(parse_count, &parse_errors);
        ck.collect_symbols();
        Checked { program: ck.program, diagnostics: ck.diags }
    }

    /// A lexing or syntax error leaves a partial tree (recovery replaced what it could not
    /// read with `Error` nodes and dropped tokens), so some findings of the checker are
    /// artefacts of the recovery, not mistakes of the user: a call that seems to lack an
    /// argument, a variable whose only use was skipped, an import whose use was. Those are
    /// dropped: every unused-name warning, and every other finding of the checker that
    /// touches the damaged source. Inside a function body the damage is the statement
    /// that holds the error (the parser's `damaged` span), so the rest of the body is still
    /// checked, except for unknown names after it (the broken statement may have been
    /// what declared them); elsewhere it is the whole member (or item, outside members).
    fn drop_cascades_of_parse_errors(&mut self, parse_count: usize, damaged_by_parser: &[Span]) {
        if damaged_by_parser.is_empty() {
            return;
        }
        let Some(main) = self.modules.iter().find(|m| m.is_main) else {
            return;
        };
        let ast = main.ast.clone();
        let inside = |outer: &Span, at: &Span| outer.file == at.file && outer.start <= at.start && at.start < outer.end;
        let mut damaged: Vec<Span> = Vec::new();
        // Where names may have been lost: (from the broken statement, to the member's end).
        let mut names_lost: Vec<Span> = Vec::new();
        for error in damaged_by_parser {
            // Items and members are in source order: binary search, not a scan per error.
            let at = error.start as usize;
            let item = amp_grammar::last_starting_at_or_before(&ast.items, at, |i| i.span);
            let Some(item) = item.filter(|i| inside(&i.span, error)) else {
                continue;
            };
            let span = match &item.kind {
                ItemKind::Component(c) => match amp_grammar::last_starting_at_or_before(&c.members, at, |m| m.span)
                    .filter(|m| inside(&m.span, error))
                {
                    Some(m) => match &m.kind {
                        MemberKind::Fn(f) if inside(&f.body.span, error) && error.end <= f.body.span.end => {
                            names_lost.push(Span { end: m.span.end, ..*error });
                            *error
                        }
                        _ => m.span,
                    },
                    // An error in the header: only the header is damaged, not the members.
                    None => {
                        let end = c.members.first().map_or(item.span.end, |m| m.span.start);
                        Span { end, ..item.span }
                    }
                },
                _ => item.span,
            };
            damaged.push(span);
        }
        let damaged = merged(damaged);
        let names_lost = merged(names_lost);
        // The parser's own diagnostics come first in `diags` and all stay.
        let mut index = 0;
        self.diags.retain(|d| {
            index += 1;
            if index <= parse_count {
                return true;
            }
            match d.code {
                Code::UnusedVariable | Code::UnusedParam | Code::UnusedImport => false,
                Code::UnknownOverride => true,
                Code::UnknownName if overlaps_any(&names_lost, &d.span) => false,
                _ => !overlaps_any(&damaged, &d.span),
            }
        });
    }

    pub(crate) fn error(&mut self, diag: Diagnostic) {
        if !is_silent(&diag) {
            self.diags.push(diag);
        }
    }

    pub(crate) fn fresh_symbol(&mut self, name: impl Into<Arc<str>>) -> Symbol {
        self.next_symbol += 1;
        Symbol { id: self.next_symbol, name: name.into(), value: None, opaque: None }
    }

    pub(crate) fn reference(&mut self, use_span: Span, def_span: Span, hover: String) {
        self.program.references.push(Reference { use_span, def_span, hover });
    }

    pub(crate) fn ty_str(&self, ty: &Ty) -> String {
        ty_to_string(&self.program, ty)
    }

    // ------------------------------------------------------------ declarations

    fn define_global(&mut self, module: usize, name: &ast::Ident, global: Global) {
        if let Some((_, previous)) = self.modules[module].scope.get(&name.name) {
            let previous = *previous;
            self.error(
                Diagnostic::new(Code::DuplicateDefinition, name.span, format!("`{}` is defined twice", name.name))
                    .with_primary("redefined here")
                    .with_label(previous, "first defined here"),
            );
            return;
        }
        self.modules[module].scope.insert(name.name.clone(), (global, name.span));
    }

    fn declare(&mut self, module: usize) {
        let ast = self.modules[module].ast.clone();
        for (index, item) in ast.items.iter().enumerate() {
            match &item.kind {
                ItemKind::Record(r) => {
                    let id = RecordId(self.program.records.len() as u32);
                    self.program.records.push(RecordDef {
                        name: r.name.name.clone(),
                        fields: Vec::new(),
                        span: r.name.span,
                        doc: item.doc.clone(),
                    });
                    self.define_global(module, &r.name, Global::Record(id));
                }
                ItemKind::Enum(e) => {
                    let id = EnumId(self.program.enums.len() as u32);
                    self.program.enums.push(EnumDef {
                        name: e.name.name.clone(),
                        variants: Vec::new(),
                        span: e.name.span,
                        doc: item.doc.clone(),
                        recursive: false,
                    });
                    self.define_global(module, &e.name, Global::Enum(id));
                }
                ItemKind::Component(c) => {
                    let id = ComponentId(self.program.components.len() as u32);
                    self.program.components.push(ComponentDef {
                        kind: c.kind,
                        name: c.name.name.clone(),
                        hyperparams: Vec::new(),
                        params: Vec::new(),
                        fns: Vec::new(),
                        span: c.name.span,
                        doc: item.doc.clone(),
                    });
                    self.components.push(ComponentInfo {
                        module,
                        item: ast.clone(),
                        item_index: index,
                        params: HashMap::new(),
                        hyperparams: HashMap::new(),
                        defaults: Vec::new(),
                        consts: HashMap::new(),
                        fns: HashMap::new(),
                        params_used: Vec::new(),
                        failed_params: Default::default(),
                    });
                    if c.kind == ComponentKind::Model && self.modules[module].is_main {
                        self.program.models.push(id);
                    }
                    self.define_global(module, &c.name, Global::Component(id));
                }
                ItemKind::Network(n) => {
                    let index = self.program.networks.len();
                    self.program.networks.push(NetworkDef {
                        name: n.name.name.clone(),
                        hyperparams: Vec::new(),
                        nodes: Vec::new(),
                        span: n.name.span,
                    });
                    self.define_global(module, &n.name, Global::Network(index));
                }
                // Its syntax error is reported; its uses resolve silently.
                ItemKind::Broken(name) => self.define_failed(module, name),
                ItemKind::Const(_) | ItemKind::Use(_) | ItemKind::Error => {}
            }
        }
    }

    fn resolve_imports(&mut self, module: usize) {
        let ast = self.modules[module].ast.clone();
        for item in &ast.items {
            let ItemKind::Use(u) = &item.kind else {
                continue;
            };
            if let Some(span) = u.malformed {
                self.error(
                    Diagnostic::new(Code::UnknownImport, span, "malformed import")
                        .with_primary("expected `use std::module::Name;` or `use std::module::{A, B};`"),
                );
                continue;
            }
            let path: Vec<&str> = u.path.iter().map(|i| i.name.as_str()).collect();
            let path_span = u.path.first().map_or(item.span, |f| f.span.to(u.path.last().map_or(f.span, |l| l.span)));
            let std_module = match path.split_first() {
                Some((&"std", rest)) => amp_stdlib::module(rest),
                _ => None,
            };
            let Some(std_module) = std_module else {
                let known: Vec<String> =
                    amp_stdlib::MODULES.iter().map(|m| format!("std::{}", m.path.join("::"))).collect();
                self.error(
                    Diagnostic::new(Code::UnknownImport, path_span, format!("no module `{}`", path.join("::")))
                        .with_primary("unknown module")
                        .with_note(format!("the standard modules are: {}", known.join(", "))),
                );
                for name in &u.names {
                    self.define_failed(module, name);
                }
                continue;
            };
            let target = self.load_std_module(std_module);
            for name in &u.names {
                let found = self.modules[target].scope.get(&name.name).cloned();
                match found {
                    Some((global, def_span)) => {
                        let index = self.modules[module].imports.len();
                        self.modules[module].imports.push(Import { name: name.clone(), used: false });
                        self.reference(
                            name.span,
                            def_span,
                            format!("use std::{}::{}", std_module.path.join("::"), name.name),
                        );
                        self.define_global(module, name, Global::Imported(Box::new(global), index));
                    }
                    None => {
                        let mut candidates: Vec<String> = self.modules[target].scope.keys().cloned().collect();
                        candidates.sort();
                        let mut d = Diagnostic::new(
                            Code::UnknownImport,
                            name.span,
                            format!("`{}` is not in `{}`", name.name, path.join("::")),
                        )
                        .with_primary("not found in this module");
                        // A typo, or an abbreviation of a longer name (`Gru` for `GruCell`).
                        let lower = name.name.to_lowercase();
                        let hint = suggest(&name.name, candidates.iter().map(String::as_str))
                            .or_else(|| candidates.iter().find(|c| c.to_lowercase().starts_with(&lower)).cloned());
                        if let Some(s) = hint {
                            d = d.with_suggestion(s);
                        }
                        d = d.with_note(format!("`{}` provides: {}", path.join("::"), candidates.join(", ")));
                        self.error(d);
                        self.define_failed(module, name);
                    }
                }
            }
        }
    }

    /// Declares a name whose definition failed (already reported), unless the name is
    /// taken: later uses then resolve to an error silently.
    fn define_failed(&mut self, module: usize, name: &ast::Ident) {
        if !self.modules[module].scope.contains_key(&name.name) {
            self.modules[module].scope.insert(name.name.clone(), (Global::Failed, name.span));
        }
    }

    fn load_std_module(&mut self, module: &amp_stdlib::Module) -> usize {
        if let Some(i) =
            self.modules.iter().position(|m| self.map.get(m.file).is_some_and(|f| f.name == module.file_name))
        {
            return i;
        }
        let file = self.map.add(module.file_name, module.source);
        let parsed = amp_grammar::parse(file, module.source);
        self.diags.extend(parsed.diagnostics);
        let index = self.modules.len();
        self.modules.push(Module {
            file,
            ast: Rc::new(parsed.ast),
            scope: HashMap::new(),
            imports: Vec::new(),
            is_main: false,
        });
        self.declare(index);
        self.resolve_imports(index);
        index
    }

    /// Looks a name up in a module scope, marking imports as used.
    pub(crate) fn lookup_global(&mut self, module: usize, name: &str) -> Option<(Global, Span)> {
        let (global, span) = self.modules[module].scope.get(name).cloned()?;
        match global {
            Global::Imported(target, import) => {
                self.modules[module].imports[import].used = true;
                Some((*target, span))
            }
            other => Some((other, span)),
        }
    }

    pub(crate) fn instance_str(&self, inst: &Instance) -> String {
        instance_to_string(&self.program, inst)
    }
}

/// `spans` sorted and with overlapping ones joined, for [`overlaps_any`].
fn merged(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_by_key(|s| (s.file, s.start));
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans {
        match out.last_mut() {
            Some(last) if last.file == span.file && span.start <= last.end => last.end = last.end.max(span.end),
            _ => out.push(span),
        }
    }
    out
}

/// Whether `at` (an empty span counts as its start) overlaps one of `sorted`, disjoint
/// spans in order: a binary search, not a scan per diagnostic.
fn overlaps_any(sorted: &[Span], at: &Span) -> bool {
    let end = at.end.max(at.start + 1);
    let before_end = sorted.partition_point(|s| (s.file, s.start) < (at.file, end));
    before_end.checked_sub(1).and_then(|i| sorted.get(i)).is_some_and(|s| s.file == at.file && s.end > at.start)
}
