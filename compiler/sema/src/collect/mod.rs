//! The program-level passes of the checker: declare items, resolve imports, resolve
//! record and enum fields, evaluate constants and hyperparameters, build `param`
//! instances and function signatures, then check bodies (in `body/`), recursion, entry
//! points, networks and unused names.

use crate::consts::is_silent;
use crate::display::{instance_to_string, ty_to_string};
use crate::shape::{Dim, Symbol};
use crate::typed::*;
use crate::{Checked, Files, Options};
use amp_diagnostics::{Code, Diagnostic, FileId, SourceMap, Span};
use amp_grammar::ast::{self, ComponentKind, ItemKind, MemberKind};
use std::collections::{HashMap, HashSet};
use std::path::Path;
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
    /// A standard module: every item is public, and it imports only other standard ones.
    pub is_std: bool,
    /// The names this module's items mark `pub`.
    pub public: HashSet<String>,
    /// Where the module was first imported: the importing module and the `use` path.
    pub imported_at: Option<(usize, Span)>,
    /// The source the parser's recovery may have misread (see `Parsed::damaged`).
    pub damaged: Vec<Span>,
    /// Imported constants, declared once their module's constants are evaluated: (the
    /// module, its name in messages, the name).
    pub const_imports: Vec<(usize, String, ast::Ident)>,
}

/// How deep imports may nest (a file importing one that imports another...): each level
/// is a frame of the checker's recursion, so a hostile chain of files must end.
pub const MAX_IMPORT_DEPTH: usize = 64;

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
    pub files: &'m dyn Files,
    pub diags: Vec<Diagnostic>,
    /// The parser's diagnostics of every module, kept apart until the checker's own
    /// findings that recovery caused are dropped.
    pub parse_diags: Vec<Diagnostic>,
    /// The modules being declared, outermost first: an import of one of them is a cycle.
    pub loading: Vec<usize>,
    /// The modules in the order their loading finished: each after every module it imports.
    pub finished: Vec<usize>,
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
    pub(crate) fn run(map: &'m mut SourceMap, main: FileId, options: &Options, files: &'m dyn Files) -> Checked {
        let mut ck = Checker {
            map,
            files,
            diags: Vec::new(),
            parse_diags: Vec::new(),
            loading: Vec::new(),
            finished: Vec::new(),
            program: Program::default(),
            next_symbol: 0,
            modules: Vec::new(),
            components: Vec::new(),
            overrides: options.defines.iter().map(|(k, v)| (k.clone(), *v, false)).collect(),
            network_scope: Vec::new(),
            body_locals: Vec::new(),
            body_locals_named: Vec::new(),
        };
        ck.enter_module(main, None, false, true);
        // A module's constants may use the ones it imports: theirs are evaluated first.
        // Record fields and variants may use constants (`f32[WIDTH]`): they come after.
        for m in ck.finished.clone() {
            for (target, display, name) in std::mem::take(&mut ck.modules[m].const_imports) {
                ck.import_names(m, target, &display, std::slice::from_ref(&name));
            }
            ck.eval_global_consts(m);
        }
        for m in 0..ck.modules.len() {
            ck.resolve_type_items(m);
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
        ck.drop_cascades_of_parse_errors();
        ck.note_import_chains();
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
    /// The parser's own diagnostics all stay: they join the checker's here.
    fn drop_cascades_of_parse_errors(&mut self) {
        let mut damaged: Vec<Span> = Vec::new();
        // Where names may have been lost: (from the broken statement, to the member's end).
        let mut names_lost: Vec<Span> = Vec::new();
        for module in &self.modules {
            for error in &module.damaged {
                let (span, lost) = damage_of(&module.ast, error);
                damaged.extend(span);
                names_lost.extend(lost);
            }
        }
        if !damaged.is_empty() {
            let damaged = merged(damaged);
            let names_lost = merged(names_lost);
            self.diags.retain(|d| match d.code {
                Code::UnusedVariable | Code::UnusedParam | Code::UnusedImport => false,
                Code::UnknownOverride => true,
                Code::UnknownName if overlaps_any(&names_lost, &d.span) => false,
                _ => !overlaps_any(&damaged, &d.span),
            });
        }
        self.diags.append(&mut self.parse_diags);
    }

    /// A diagnostic in an imported file says how the program reached that file, so a
    /// user who checked `two.amp` knows why `shared/encoders.amp` is being reported.
    fn note_import_chains(&mut self) {
        let module_of: HashMap<FileId, usize> = self.modules.iter().enumerate().map(|(i, m)| (m.file, i)).collect();
        for d in &mut self.diags {
            let Some(&module) = module_of.get(&d.span.file) else { continue };
            if self.modules[module].imported_at.is_none() || self.modules[module].is_std {
                continue;
            }
            let mut chain = vec![format!("`{}`", file_name(self.map, self.modules[module].file))];
            let mut at = self.modules[module].imported_at;
            // Each module records the one that first imported it, which was loaded before
            // it: the walk ends at the main file.
            while let Some((importer, span)) = at {
                let line = self.map.get(span.file).map_or(0, |f| f.line_col(span.start as usize).0 + 1);
                chain.push(format!("`{}` line {line}", file_name(self.map, self.modules[importer].file)));
                at = self.modules[importer].imported_at;
            }
            chain.reverse();
            d.notes.push(format!("imported through {}", chain.join(" → ")));
        }
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
            if let Some(public) = item.public {
                self.error(
                    Diagnostic::new(Code::UnexpectedToken, public, "an import cannot be `pub`")
                        .with_primary("imports are not passed on")
                        .with_help("files that need the name import it from where it is defined")
                        .with_replacement(""),
                );
            }
            if let Some(span) = u.malformed {
                self.error(
                    Diagnostic::new(Code::UnknownImport, span, "malformed import")
                        .with_primary("expected `use module::Name;` or `use module::{A, B};`"),
                );
                continue;
            }
            let path: Vec<&str> = u.path.iter().map(|i| i.name.as_str()).collect();
            let path_span = u.path.first().map_or(item.span, |f| f.span.to(u.path.last().map_or(f.span, |l| l.span)));
            let target = match path.split_first() {
                Some((&"std", rest)) => self.std_module(rest, path_span),
                _ => self.user_module(module, &path, path_span),
            };
            match target {
                Some(target) => self.import_names(module, target, &path.join("::"), &u.names),
                None => {
                    for name in &u.names {
                        self.define_failed(module, name);
                    }
                }
            }
        }
    }

    /// Declares `names` of module `target` (called `display` in messages) in `module`.
    fn import_names(&mut self, module: usize, target: usize, display: &str, names: &[ast::Ident]) {
        for name in names {
            let found = self.modules[target].scope.get(&name.name).cloned();
            if found.is_none() && self.defines_const(target, &name.name) {
                // Constants enter their module's scope when evaluated, after imports.
                self.modules[module].const_imports.push((target, display.to_string(), name.clone()));
                continue;
            }
            let Some((global, def_span)) = found else {
                // What the module defines, not what it imports.
                let scope = &self.modules[target].scope;
                let mut candidates: Vec<String> = scope
                    .iter()
                    .filter(|(_, (g, _))| !matches!(g, Global::Imported(..)))
                    .map(|(n, _)| n.clone())
                    .collect();
                candidates.sort();
                let mut d =
                    Diagnostic::new(Code::UnknownImport, name.span, format!("`{}` is not in `{display}`", name.name))
                        .with_primary("not found in this module");
                // A typo, or an abbreviation of a longer name (`Gru` for `GruCell`).
                let lower = name.name.to_lowercase();
                let hint = suggest(&name.name, candidates.iter().map(String::as_str))
                    .or_else(|| candidates.iter().find(|c| c.to_lowercase().starts_with(&lower)).cloned());
                if let Some(s) = hint {
                    d = d.with_suggestion(s);
                }
                d = d.with_note(format!("`{display}` provides: {}", candidates.join(", ")));
                self.error(d);
                self.define_failed(module, name);
                continue;
            };
            let global = match global {
                // A name the target itself imported: reported below as not its own.
                Global::Imported(inner, _) => *inner,
                other => other,
            };
            if !self.modules[target].is_std && !self.modules[target].public.contains(&name.name) {
                self.report_private(target, display, name, def_span);
            }
            let index = self.modules[module].imports.len();
            self.modules[module].imports.push(Import { name: name.clone(), used: false });
            self.reference(name.span, def_span, format!("use {display}::{}", name.name));
            self.define_global(module, name, Global::Imported(Box::new(global), index));
        }
    }

    fn defines_const(&self, module: usize, name: &str) -> bool {
        self.modules[module].ast.items.iter().any(|i| matches!(&i.kind, ItemKind::Const(c) if c.name.name == name))
    }

    /// `name`, imported from user module `target`, is not marked `pub` there (or is an
    /// import of that module, which is not passed on). The import still resolves, so its
    /// uses are not reported again.
    fn report_private(&mut self, target: usize, display: &str, name: &ast::Ident, def_span: Span) {
        let imported_there = self.modules[target].imports.iter().any(|i| i.name.name == name.name);
        let d = Diagnostic::new(Code::PrivateImport, name.span, format!("`{}` is private to `{display}`", name.name));
        let d = if imported_there {
            d.with_primary("imported by that module, not defined there")
                .with_label(def_span, "imported here")
                .with_help("import it from the module that defines it")
        } else {
            // `pub ` before the item's keyword: the definition's name follows that keyword.
            let item = self.modules[target]
                .ast
                .items
                .iter()
                .find(|i| i.span.start <= def_span.start && def_span.end <= i.span.end)
                .map(|i| Span { end: i.span.start, ..i.span });
            let d = d
                .with_primary("not marked `pub`")
                .with_label(def_span, "defined here")
                .with_help(format!("mark it `pub` in `{}`", file_name(self.map, self.modules[target].file)));
            match item {
                Some(at) => d.with_insertion(at, "pub "),
                None => d,
            }
        };
        self.error(d);
    }

    /// Declares a name whose definition failed (already reported), unless the name is
    /// taken: later uses then resolve to an error silently.
    fn define_failed(&mut self, module: usize, name: &ast::Ident) {
        if !self.modules[module].scope.contains_key(&name.name) {
            self.modules[module].scope.insert(name.name.clone(), (Global::Failed, name.span));
        }
    }

    /// The module index of `std::<path>`, loaded on first use; `None` after reporting
    /// that there is no such module.
    fn std_module(&mut self, path: &[&str], path_span: Span) -> Option<usize> {
        let Some(std) = amp_stdlib::module(path) else {
            self.error(
                Diagnostic::new(Code::UnknownImport, path_span, format!("no module `std::{}`", path.join("::")))
                    .with_primary("unknown module")
                    .with_note(format!("the standard modules are: {}", standard_modules())),
            );
            return None;
        };
        if let Some(i) = self.loaded(std.file_name) {
            return Some(i);
        }
        Some(self.load_module(std.file_name.to_string(), std.source.to_string(), None, true))
    }

    /// The module index of a user module, `a::b` being `a/b.amp` or `a/b/mod.amp` beside
    /// the importing file, read through `files` on first use; `None` after reporting why
    /// it cannot be imported (no such file, an unreadable one, a cycle, too deep).
    fn user_module(&mut self, importer: usize, path: &[&str], path_span: Span) -> Option<usize> {
        let display = path.join("::");
        let importer_name = file_name(self.map, self.modules[importer].file).to_string();
        let dir = Path::new(&importer_name).parent().unwrap_or(Path::new(""));
        let base = path.iter().fold(dir.to_path_buf(), |p, seg| p.join(seg));
        let candidates = [base.with_extension("amp"), base.join("mod.amp")];
        for candidate in &candidates {
            let name = candidate.display().to_string();
            if let Some(i) = self.loaded(&name) {
                if let Some(from) = self.loading.iter().position(|&l| l == i) {
                    self.report_cycle(from, path_span);
                    return None;
                }
                return Some(i);
            }
            if self.modules[importer].is_std {
                break;
            }
            match self.files.read(candidate) {
                Ok(text) => {
                    if self.loading.len() >= MAX_IMPORT_DEPTH {
                        self.error(
                            Diagnostic::new(
                                Code::UnknownImport,
                                path_span,
                                format!("`{display}` is imported too deeply"),
                            )
                            .with_primary(format!("the {MAX_IMPORT_DEPTH}th nested import"))
                            .with_note(format!("imports nest at most {MAX_IMPORT_DEPTH} files deep")),
                        );
                        return None;
                    }
                    return Some(self.load_module(name, text, Some((importer, path_span)), false));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.error(
                        Diagnostic::new(Code::UnknownImport, path_span, format!("cannot read module `{display}`"))
                            .with_primary(format!("`{name}`: {e}")),
                    );
                    return None;
                }
            }
        }
        let [file, folder] = candidates.map(|c| c.display().to_string());
        let mut d = Diagnostic::new(Code::UnknownImport, path_span, format!("no module `{display}`"))
            .with_primary("unknown module")
            .with_note(format!("looked for `{file}` and `{folder}`"));
        d = match amp_stdlib::module(path) {
            Some(_) => d.with_suggestion(format!("std::{display}")),
            None => d.with_note(format!("the standard modules are: {}", standard_modules())),
        };
        self.error(d);
        None
    }

    /// An import of the module `loading[from]`, which is still being loaded: the cycle
    /// is the modules from it to the importer.
    fn report_cycle(&mut self, from: usize, path_span: Span) {
        let mut names: Vec<String> =
            self.loading[from..].iter().map(|&m| format!("`{}`", file_name(self.map, self.modules[m].file))).collect();
        names.push(names[0].clone());
        self.error(
            Diagnostic::new(Code::ImportCycle, path_span, "this import closes a cycle")
                .with_primary(format!("{} is already being imported", names[0]))
                .with_note(format!("the cycle: {}", names.join(" → ")))
                .with_help("move what these files share into a module that none of them imports"),
        );
    }

    /// The module of the file the map calls `name`, if it is loaded.
    fn loaded(&self, name: &str) -> Option<usize> {
        let file = self.map.find(name)?;
        self.modules.iter().position(|m| m.file == file)
    }

    /// Adds a new module's file to the map and enters it (see [`Checker::enter_module`]).
    fn load_module(&mut self, name: String, text: String, imported_at: Option<(usize, Span)>, is_std: bool) -> usize {
        let file = self.map.add(name, text);
        self.enter_module(file, imported_at, is_std, false)
    }

    /// Parses the module in `file`, declares its items and resolves its imports (loading
    /// the modules they name first).
    fn enter_module(&mut self, file: FileId, imported_at: Option<(usize, Span)>, is_std: bool, is_main: bool) -> usize {
        let parsed = amp_grammar::parse(file, self.map.get(file).map_or("", |f| f.text.as_str()));
        self.parse_diags.extend(parsed.diagnostics);
        let index = self.modules.len();
        self.modules.push(Module {
            file,
            public: public_names(&parsed.ast),
            ast: Rc::new(parsed.ast),
            scope: HashMap::new(),
            imports: Vec::new(),
            is_main,
            is_std,
            imported_at,
            damaged: parsed.damaged,
            const_imports: Vec::new(),
        });
        self.loading.push(index);
        self.declare(index);
        self.resolve_imports(index);
        self.loading.pop();
        self.finished.push(index);
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

/// What one parser error may have damaged in `ast` (see
/// [`Checker::drop_cascades_of_parse_errors`]): the source whose findings are dropped, and
/// where unknown names are, when the error is inside a function body.
fn damage_of(ast: &ast::SourceFileAst, error: &Span) -> (Option<Span>, Option<Span>) {
    let inside = |outer: &Span, at: &Span| outer.file == at.file && outer.start <= at.start && at.start < outer.end;
    // Items and members are in source order: binary search, not a scan per error.
    let at = error.start as usize;
    let item = amp_grammar::last_starting_at_or_before(&ast.items, at, |i| i.span);
    let Some(item) = item.filter(|i| inside(&i.span, error)) else {
        return (None, None);
    };
    let ItemKind::Component(c) = &item.kind else {
        return (Some(item.span), None);
    };
    let member = amp_grammar::last_starting_at_or_before(&c.members, at, |m| m.span).filter(|m| inside(&m.span, error));
    match member {
        Some(m) => match &m.kind {
            MemberKind::Fn(f) if inside(&f.body.span, error) && error.end <= f.body.span.end => {
                (Some(*error), Some(Span { end: m.span.end, ..*error }))
            }
            _ => (Some(m.span), None),
        },
        // An error in the header: only the header is damaged, not the members.
        None => {
            let end = c.members.first().map_or(item.span.end, |m| m.span.start);
            (Some(Span { end, ..item.span }), None)
        }
    }
}

/// The names of the items of a file marked `pub`.
fn public_names(ast: &ast::SourceFileAst) -> HashSet<String> {
    let name = |item: &ast::Item| -> Option<String> {
        item.public?;
        Some(match &item.kind {
            ItemKind::Const(c) => c.name.name.clone(),
            ItemKind::Record(r) => r.name.name.clone(),
            ItemKind::Enum(e) => e.name.name.clone(),
            ItemKind::Component(c) => c.name.name.clone(),
            ItemKind::Network(n) => n.name.name.clone(),
            ItemKind::Broken(name) => name.name.clone(),
            ItemKind::Use(_) | ItemKind::Error => return None,
        })
    };
    ast.items.iter().filter_map(name).collect()
}

fn standard_modules() -> String {
    amp_stdlib::MODULES.iter().map(|m| format!("std::{}", m.path.join("::"))).collect::<Vec<_>>().join(", ")
}

fn file_name(map: &SourceMap, file: FileId) -> &str {
    map.get(file).map_or("", |f| f.name.as_str())
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
