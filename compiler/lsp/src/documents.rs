//! The open documents: each one's text, version and the analysis of that text.
//!
//! Every change re-checks the whole document (the checker takes milliseconds on the
//! canonical examples), so the cached [`Analysis`] belongs to the current text whenever a
//! request can read it, and hover, definition, symbols and completion read it without
//! re-checking. The one exception, a change that the server knows another will replace
//! before any request ([`Document::change_text`]), leaves the old analysis in place until
//! that next change.

use crate::convert::{self, offset_of};
use crate::stdlib_files::StdlibFiles;
use amp_diagnostics::{FileId, LineIndex, SourceFile, SourceMap};
use amp_sema::{check_program, Checked, Options, Program};
use lsp_types::{TextDocumentContentChangeEvent, Uri};

/// The outcome of checking one document: its SourceMap (the document plus the standard
/// modules it imports) and what the checker found.
#[derive(Debug)]
pub struct Analysis {
    pub map: SourceMap,
    pub main: FileId,
    pub checked: Checked,
}

impl Analysis {
    /// Checks `text` as a file called `name`.
    pub fn of(name: &str, text: &str) -> Analysis {
        let mut map = SourceMap::new();
        let main = map.add(name, text);
        let checked = check_program(&mut map, main, &Options::default());
        Analysis { map, main, checked }
    }

    /// The document's own file.
    pub fn main_file(&self) -> Option<&SourceFile> {
        self.map.get(self.main)
    }

    pub fn program(&self) -> &Program {
        &self.checked.program
    }
}

/// One open document.
#[derive(Debug)]
pub struct Document {
    pub uri: Uri,
    pub version: i32,
    pub text: String,
    pub analysis: Analysis,
}

impl Document {
    pub fn open(uri: Uri, version: i32, text: String) -> Document {
        let analysis = Analysis::of(uri.as_str(), &text);
        Document { uri, version, text, analysis }
    }

    /// Applies the changes of one `didChange` in order and re-checks.
    pub fn change(&mut self, version: i32, changes: Vec<TextDocumentContentChangeEvent>) {
        self.change_text(version, changes);
        self.analysis = Analysis::of(self.uri.as_str(), &self.text);
    }

    /// Applies the changes of one `didChange` without re-checking: only for a change that
    /// another follows before the analysis can be read (the server's stale edits).
    pub fn change_text(&mut self, version: i32, changes: Vec<TextDocumentContentChangeEvent>) {
        let mut text = std::mem::take(&mut self.text);
        for change in changes {
            text = apply_change(text, change);
        }
        self.version = version;
        self.text = text;
    }

    /// Replaces the whole text (a save that includes it) and re-checks.
    pub fn replace_text(&mut self, text: String) {
        self.analysis = Analysis::of(self.uri.as_str(), &text);
        self.text = text;
    }

    /// The URI of a file of this document's analysis: the document itself or a
    /// materialised standard module.
    pub fn uri_of(&self, file: FileId, stdlib: &StdlibFiles) -> Option<Uri> {
        if file == self.analysis.main {
            return Some(self.uri.clone());
        }
        stdlib.uri_of(&self.analysis.map.get(file)?.name)
    }

    /// The document's diagnostics in LSP form. Diagnostics whose primary span lies in
    /// another file (a standard module) belong to that file, not to this document. Codes
    /// link to their pages under `error_pages` when given.
    pub fn diagnostics(&self, stdlib: &StdlibFiles, error_pages: Option<&str>) -> Vec<lsp_types::Diagnostic> {
        self.analysis
            .checked
            .diagnostics
            .iter()
            .filter(|d| d.span.file == self.analysis.main)
            .filter_map(|d| self.to_lsp_diagnostic(d, stdlib, error_pages))
            .collect()
    }

    /// One diagnostic of this document's analysis in LSP form (see [`Document::diagnostics`]).
    pub fn to_lsp_diagnostic(
        &self,
        diagnostic: &amp_diagnostics::Diagnostic,
        stdlib: &StdlibFiles,
        error_pages: Option<&str>,
    ) -> Option<lsp_types::Diagnostic> {
        let uri_of = |file: FileId| self.uri_of(file, stdlib);
        convert::to_lsp_diagnostic(diagnostic, &self.analysis.map, &uri_of, error_pages)
    }
}

/// `text` after one content change: a whole new text, or a replacement of a range given
/// in UTF-16 positions (out-of-range positions clamp; a reversed range is read forwards).
pub fn apply_change(text: String, change: TextDocumentContentChangeEvent) -> String {
    let Some(range) = change.range else {
        return change.text;
    };
    let file = SourceFile { name: String::new(), lines: LineIndex::new(&text), text };
    let start = offset_of(&file, range.start);
    let end = offset_of(&file, range.end);
    let (start, end) = (start.min(end), start.max(end));
    let mut text = file.text;
    text.replace_range(start..end, &change.text);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsp_types::{Position, Range};

    fn edit(range: Option<((u32, u32), (u32, u32))>, text: &str) -> TextDocumentContentChangeEvent {
        TextDocumentContentChangeEvent {
            range: range.map(|((l0, c0), (l1, c1))| Range::new(Position::new(l0, c0), Position::new(l1, c1))),
            range_length: None,
            text: text.to_string(),
        }
    }

    #[test]
    fn incremental_changes_use_utf16_columns() {
        let text = "let a = 1;\n// é𝄞 x\n".to_string();
        // `x` is at UTF-16 column 7 of line 1 (`𝄞` counts twice).
        let text = apply_change(text, edit(Some(((1, 7), (1, 8))), "yz"));
        assert_eq!(text, "let a = 1;\n// é𝄞 yz\n");
        let text = apply_change(text, edit(Some(((0, 4), (0, 5))), "b"));
        assert_eq!(text, "let b = 1;\n// é𝄞 yz\n");
        // Insertion at the very end, and past it (clamped).
        let text = apply_change(text, edit(Some(((2, 0), (2, 0))), "end"));
        assert_eq!(text, "let b = 1;\n// é𝄞 yz\nend");
        let text = apply_change(text, edit(Some(((40, 3), (41, 0))), "!"));
        assert_eq!(text, "let b = 1;\n// é𝄞 yz\nend!");
    }

    #[test]
    fn reversed_ranges_and_full_replacements() {
        let text = apply_change("abcdef".into(), edit(Some(((0, 4), (0, 1))), "-"));
        assert_eq!(text, "a-ef");
        assert_eq!(apply_change(text, edit(None, "new")), "new");
    }

    #[test]
    fn a_change_re_checks_the_document() {
        let uri: Uri = "file:///a.amp".parse().expect("valid");
        let broken = "model M() { fn forward(x: f32) -> f32 { foo } fn loss(x: f32) -> f32 { x } }";
        let mut doc = Document::open(uri, 1, broken.to_string());
        assert!(!doc.diagnostics(&StdlibFiles::none(), None).is_empty());
        let start = u32::try_from(broken.find("foo").expect("present")).expect("small");
        doc.change(2, vec![edit(Some(((0, start), (0, start + 3))), "x")]);
        assert_eq!(doc.version, 2);
        assert!(doc.text.contains("{ x }"));
        assert_eq!(doc.diagnostics(&StdlibFiles::none(), None), Vec::new());
    }
}
