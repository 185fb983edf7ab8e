//! Semantic analysis of Amp: names, types and tensor shapes.
//!
//! In: a [`SourceMap`] holding the main file, [`Options`] (hyperparameter overrides) and
//! the [`Files`] its imports are read from; the files it imports (user modules and the
//! standard library) are added to the map as they are loaded. Out: a typed [`Program`]
//! and every diagnostic found, the parser's included, in whichever file they are. The
//! [`rollout`] module analyses a checked network's rollout patterns. The checker does no
//! IO of its own: [`DiskFiles`] is the one reader of the disk, for the command lines.
//! Depends on `amp-grammar`, `amp-stdlib` and `amp-diagnostics`.
//!
//! Invariants: checking never panics and terminates on any input; an expression whose
//! type could not be determined has type [`Ty::Error`], which fits everything, so each
//! mistake is reported once.

mod body;
mod builtins;
mod collect;
mod consts;
mod display;
mod files;
mod network;
mod params;
mod recursion;
pub mod rollout;
pub mod shape;
pub mod typed;

pub use collect::MAX_IMPORT_DEPTH;
pub use files::{DiskFiles, Files, NoFiles};
pub use params::{ParamInit, ParamTensor};
pub use shape::{Dim, Poly, Shape, Symbol};
pub use typed::*;

use amp_diagnostics::{Diagnostic, FileId, SourceMap};

/// What the checker needs besides the source.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `-D name=value` overrides of model hyperparameters and top-level constants.
    pub defines: Vec<(String, i64)>,
}

/// Parses one `-D NAME=VALUE` override as the command lines take it.
pub fn parse_define(text: &str) -> Result<(String, i64), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("expected NAME=VALUE, got `{text}`"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("`{name}` is not a hyperparameter name"));
    }
    let value = value.trim().parse::<i64>().map_err(|_| format!("`{value}` is not an integer"))?;
    Ok((name.to_string(), value))
}

/// The outcome of checking one program.
#[derive(Clone, Debug)]
pub struct Checked {
    pub program: Program,
    /// Sorted by position; parser diagnostics included.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        amp_diagnostics::has_errors(&self.diagnostics)
    }
}

/// Parses and checks the program whose main file is `main`, reading the modules it
/// imports from `files` (`a::b` is `a/b.amp` or `a/b/mod.amp` beside the importing file,
/// whose name in `map` is its path). Every module the program imports is added to `map`
/// once, so diagnostics and definitions can point into it.
pub fn check_program(map: &mut SourceMap, main: FileId, options: &Options, files: &dyn Files) -> Checked {
    let mut checked = collect::Checker::run(map, main, options, files);
    amp_diagnostics::sort(&mut checked.diagnostics);
    checked
}

/// Convenience for tests and tools: checks `text` as a file named `name`, which may import
/// only the standard library.
pub fn check_source(name: &str, text: &str, options: &Options) -> (SourceMap, Checked) {
    let mut map = SourceMap::new();
    let main = map.add(name, text);
    let checked = check_program(&mut map, main, options, &NoFiles);
    (map, checked)
}

/// Renders a type the way diagnostics and hover show it.
pub fn type_to_string(program: &Program, ty: &Ty) -> String {
    display::ty_to_string(program, ty)
}
