//! Spans, source files and the one diagnostic type shared by every stage of Amp.
//!
//! In: source text registered in a [`SourceMap`]. Out: [`Diagnostic`] values with a
//! stable [`Code`], a primary [`Span`], secondary labels, notes and help; printed by
//! [`render_human`] (ariadne, for terminals and snapshots) or [`render_json`] (one
//! object per line for tools). The language server is the third printer and lives in
//! its own crate. Depends on nothing of Amp's: the grammar, the checker, the IR and the
//! runtime all use it, so runtime errors can point back at source.

mod codes;
mod render;
mod source;

pub use codes::Code;
pub use render::{render_human, render_json, JsonDiagnostic, JsonLabel, Position};
pub use source::{FileId, LineIndex, SourceFile, SourceMap, Span};

/// How bad a diagnostic is. Errors make `ampc` exit with status 1; warnings do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A secondary location with a message, e.g. "declared here" or "this has shape f32[4]".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One error or warning. Every stage produces these; every printer consumes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    /// Where the problem is; its label text (possibly empty) is `primary_label`.
    pub span: Span,
    pub primary_label: String,
    pub labels: Vec<Label>,
    pub notes: Vec<String>,
    pub help: Option<String>,
    /// Text that replaces the primary span to fix the problem, when the fix is that
    /// mechanical (a misspelled name, an unused variable renamed `_x`): the editor's
    /// quick fix. `help` says the same in words.
    pub replacement: Option<String>,
    /// Where `replacement` goes when that is not the primary span; an empty span inserts
    /// it there (a missing `loss` before the model's `}`, a `use` at the top).
    pub replacement_span: Option<Span>,
}

impl Diagnostic {
    pub fn new(code: Code, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            span,
            primary_label: String::new(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
            replacement: None,
            replacement_span: None,
        }
    }

    pub fn severity(&self) -> Severity {
        self.code.severity()
    }

    /// The text shown under the primary span.
    pub fn with_primary(mut self, message: impl Into<String>) -> Self {
        self.primary_label = message.into();
        self
    }

    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label { span, message: message.into() });
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Help `did you mean `name`?`, with `name` as the replacement of the primary span
    /// (which must hold the misspelled name).
    pub fn with_suggestion(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.with_help(format!("did you mean `{name}`?")).with_replacement(name)
    }

    /// The text that replaces the primary span to fix the problem (see `replacement`).
    pub fn with_replacement(mut self, text: impl Into<String>) -> Self {
        self.replacement = Some(text.into());
        self
    }

    /// `text` inserted at `at` (or replacing it) fixes the problem: the editor's quick fix.
    pub fn with_insertion(mut self, at: Span, text: impl Into<String>) -> Self {
        self.replacement = Some(text.into());
        self.replacement_span = Some(at);
        self
    }
}

/// Whether any of `diagnostics` is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(|d| d.severity() == Severity::Error)
}

/// Sorts diagnostics by file and position, errors before warnings at the same place,
/// so that every printer shows them in source order.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by_key(|d| (d.span.file, d.span.start, d.span.end, d.severity(), d.code));
}
