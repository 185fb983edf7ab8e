//! The program-level passes of the checker: declare items, resolve imports, resolve
//! record and enum fields, evaluate constants and hyperparameters, build `param`
//! instances and function signatures, then check bodies (in `body.rs`), recursion, entry
//! points, networks and unused names.

use crate::consts::{eval_dim, is_silent, DimScope};
use crate::display::{instance_to_string, ty_to_string};
use crate::shape::{Dim, Symbol};
use crate::typed::*;
use crate::{Checked, Options};
use amp_diagnostics::{Code, Diagnostic, FileId, SourceMap, Span};
use amp_grammar::ast::{self, ComponentKind, ItemKind, MemberKind, TypeExpr, TypeExprKind};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

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
        let parse_errors: Vec<Span> = parsed
            .diagnostics
            .iter()
            .filter(|d| d.severity() == amp_diagnostics::Severity::Error)
            .map(|d| d.span)
            .collect();
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
    /// dropped: every unused-name warning, and every other finding of the checker inside a
    /// member (or item, outside members) that holds a lexing or syntax error.
    fn drop_cascades_of_parse_errors(&mut self, parse_count: usize, parse_errors: &[Span]) {
        if parse_errors.is_empty() {
            return;
        }
        let Some(main) = self.modules.iter().find(|m| m.is_main) else {
            return;
        };
        let ast = main.ast.clone();
        let inside = |outer: &Span, at: &Span| outer.file == at.file && outer.start <= at.start && at.start < outer.end;
        let mut damaged: Vec<Span> = Vec::new();
        for error in parse_errors {
            let Some(item) = ast.items.iter().find(|i| inside(&i.span, error)) else {
                continue;
            };
            let span = match &item.kind {
                ItemKind::Component(c) => match c.members.iter().find(|m| inside(&m.span, error)) {
                    Some(m) => m.span,
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
                _ => !damaged.iter().any(|m| inside(m, &d.span)),
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
                            d = d.with_help(format!("did you mean `{s}`?"));
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
                            d = d.with_help(format!("did you mean `{s}`?"));
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

    fn resolve_type_items(&mut self, module: usize) {
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

    fn resolve_fields(&mut self, module: usize, decls: &[ast::FieldDecl]) -> Vec<FieldDef> {
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

    fn eval_global_consts(&mut self, module: usize) {
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
    fn eval_const(&mut self, module: usize, comp: Option<ComponentId>, c: &ast::ConstItem) -> Option<Dim> {
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

    // ------------------------------------------------------------ components

    fn declare_hyperparams(&mut self, id: ComponentId) {
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

    fn member_name_span(&self, id: ComponentId, name: &str) -> Option<Span> {
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

    fn duplicate_member(&mut self, name: &ast::Ident, prev: Span) {
        self.error(
            Diagnostic::new(Code::DuplicateDefinition, name.span, format!("`{}` is defined twice", name.name))
                .with_primary("redefined here")
                .with_label(prev, "first defined here"),
        );
    }

    fn declare_params(&mut self, id: ComponentId) {
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
                            "declare a `Linear`, `Embedding` or layer here and apply the function in `fn` bodies",
                        ),
                    );
                    return None;
                }
                let mut dims = Vec::new();
                for a in args {
                    dims.push((self.eval_dim_in(module, comp, a)?, a.span));
                }
                match name.name.as_str() {
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
                                        "parameters are `Linear`, `Embedding`, a `layer`, or an array of them",
                                    )
                                    .with_label(def, "defined here"),
                            );
                            None
                        }
                        None => {
                            let mut candidates: Vec<String> = vec!["Linear".into(), "Embedding".into()];
                            candidates.extend(self.modules[module].scope.keys().cloned());
                            let mut d =
                                Diagnostic::new(Code::UnknownName, name.span, format!("unknown layer `{other}`"))
                                    .with_primary("not found in this scope");
                            match suggest(other, candidates.iter().map(String::as_str)) {
                                Some(s) => d = d.with_help(format!("did you mean `{s}`?")),
                                None => {
                                    if ["Mlp", "GruCell", "LstmCell", "TreeLstmCell"].contains(&other) {
                                        d = d.with_help(format!("import it with `use std::nn::{other};`"));
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

    fn invalid_param(&mut self, span: Span) -> Option<Instance> {
        self.error(
            Diagnostic::new(Code::InvalidParam, span, "invalid parameter declaration")
                .with_primary("expected `Linear(in, out)`, `Embedding(n, d)`, a layer, or `[Layer(...); n]`"),
        );
        None
    }

    fn instantiate_layer(
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
    fn collect_non_positive(
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

    fn declare_signatures(&mut self, id: ComponentId) {
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

    // ------------------------------------------------------------ whole-program checks

    fn check_entry_points(&mut self) {
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
                None => self.error(
                    Diagnostic::new(Code::MissingLoss, name_span, format!("model `{name}` has no `loss` function"))
                        .with_primary("this model cannot be trained")
                        .with_help("add `fn loss(x: Input) -> f32 { cross_entropy(forward(x), x.label) }`"),
                ),
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

    fn warn_unused(&mut self) {
        for c in 0..self.components.len() {
            if !self.modules[self.components[c].module].is_main {
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
            if !self.modules[m].is_main {
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

    fn report_unknown_overrides(&mut self, main: FileId) {
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

    fn collect_symbols(&mut self) {
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

    pub(crate) fn instance_str(&self, inst: &Instance) -> String {
        instance_to_string(&self.program, inst)
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

/// Name lookup for constant expressions inside a component (or at top level).
pub(crate) struct ComponentScope<'c, 'm> {
    pub ck: &'c mut Checker<'m>,
    pub module: usize,
    pub comp: Option<ComponentId>,
}

impl DimScope for ComponentScope<'_, '_> {
    fn lookup_dim(&mut self, name: &ast::Ident) -> Result<Dim, Box<Diagnostic>> {
        if let Some((n, dim, def)) = self.ck.network_scope.iter().find(|(n, ..)| *n == name.name).cloned() {
            let hover = match dim.value {
                Some(v) => format!("{n}: int = {v}"),
                None => format!("{n}: int"),
            };
            self.ck.reference(name.span, def, hover);
            return Ok(dim);
        }
        if let Some(comp) = self.comp {
            let info = &self.ck.components[comp.0 as usize];
            if let Some(&i) = info.hyperparams.get(&name.name) {
                let hp = &self.ck.program.components[comp.0 as usize].hyperparams[i];
                let dim = Dim::symbol(hp.symbol.clone(), hp.value);
                let hover = match hp.value {
                    Some(v) => format!("{}: int = {v}", hp.name),
                    None => format!("{}: int", hp.name),
                };
                let def = hp.span;
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
                    d = d.with_help(format!("did you mean `{s}`?"));
                }
                Err(Box::new(d))
            }
        }
    }
}

pub(crate) fn const_hover(name: &str, dim: &Dim) -> String {
    match dim.value {
        Some(v) => format!("const {name}: int = {v}"),
        None => format!("const {name}: int"),
    }
}
