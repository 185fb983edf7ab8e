//! Amp's standard library: `.amp` sources embedded into the compiler.
//!
//! In: nothing. Out: the text of each standard module by its path (`std::nn`). The
//! checker parses and checks a module when a program imports from it; the test suite
//! checks every module on its own.

/// One standard module.
#[derive(Clone, Copy, Debug)]
pub struct Module {
    /// The path a `use` names, without the leading `std`: `["nn"]`.
    pub path: &'static [&'static str],
    /// The display name used in diagnostics.
    pub file_name: &'static str,
    pub source: &'static str,
}

/// Every standard module.
pub const MODULES: &[Module] =
    &[Module { path: &["nn"], file_name: "<std>/nn.amp", source: include_str!("../std/nn.amp") }];

/// The module `std::<path>`, if there is one.
pub fn module(path: &[&str]) -> Option<&'static Module> {
    MODULES.iter().find(|m| m.path == path)
}
