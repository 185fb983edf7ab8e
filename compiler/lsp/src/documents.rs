//! The open documents: each one's text, version and the analysis of that text with the
//! modules it imports.
//!
//! Every change re-checks the whole document (the checker takes milliseconds on the
//! canonical examples), so the cached [`Analysis`] belongs to the current text whenever a
//! request can read it, and hover, definition, symbols and completion read it without
//! re-checking. The one exception, a change that the server knows another will replace
//! before any request ([`Document::change_text`]), leaves the old analysis in place until
//! that next change. A document whose URI is a file is named by its path in the analysis,
//! so the modules it imports are found beside it (through the [`Files`] the server gives:
//! open documents first, then the disk).

use crate::convert::{self, checked_offset};
use crate::stdlib_files::StdlibFiles;
use amp_diagnostics::{FileId, LineIndex, SourceFile, SourceMap};
use amp_sema::{check_program, Checked, Files, Options, Program};
use lsp_types::{TextDocumentContentChangeEvent, Uri};
use std::path::Path;

/// The outcome of checking one document: its SourceMap (the document plus the modules it
/// imports) and what the checker found.
#[derive(Debug)]
pub struct Analysis {
    pub map: SourceMap,
    pub main: FileId,
    pub checked: Checked,
}

impl Analysis {
    /// Checks `text` as a file called `name` (its path, for a file), reading the modules it
    /// imports from `files`.
    pub fn of(name: &str, text: &str, files: &dyn Files) -> Analysis {
        let mut map = SourceMap::new();
        let main = map.add(name, text);
        let checked = check_program(&mut map, main, &Options::default(), files);
        Analysis { map, main, checked }
    }

    /// Whether the file named `name` is part of this analysis (the document or a module it
    /// imports, directly or not).
    pub fn reads(&self, name: &str) -> bool {
        self.map.find(name).is_some()
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

/// The name of the document `uri` in its analysis: the path of a file, else the URI.
pub fn name_of(uri: &Uri) -> String {
    convert::file_path(uri).map_or_else(|| uri.as_str().to_string(), |p| p.display().to_string())
}

impl Document {
    pub fn open(uri: Uri, version: i32, text: String, files: &dyn Files) -> Document {
        let analysis = Analysis::of(&name_of(&uri), &text, files);
        Document { uri, version, text, analysis }
    }

    /// Applies the changes of one `didChange` in order and re-checks.
    pub fn change(
        &mut self,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
        files: &dyn Files,
    ) -> Result<(), String> {
        let applied = self.change_text(version, changes);
        self.recheck(files);
        applied
    }

    /// Checks the current text again (a module it imports changed).
    pub fn recheck(&mut self, files: &dyn Files) {
        let name = self.name().to_string();
        self.analysis = Analysis::of(&name, &self.text, files);
    }

    /// The document's name in its analysis ([`name_of`] its URI).
    pub fn name(&self) -> &str {
        self.analysis.main_file().map_or("", |f| f.name.as_str())
    }

    /// Applies the changes of one `didChange` without re-checking: only for a change that
    /// another follows before the analysis can be read (the server's stale edits). A
    /// change whose range is outside the text is refused with the ones after it (the
    /// earlier ones stay applied, as the editor sent them in order), and said why.
    pub fn change_text(&mut self, version: i32, changes: Vec<TextDocumentContentChangeEvent>) -> Result<(), String> {
        let mut text = std::mem::take(&mut self.text);
        let mut applied = Ok(());
        for change in changes {
            match apply_change(text, change) {
                Ok(changed) => text = changed,
                Err((unchanged, why)) => {
                    text = unchanged;
                    applied = Err(why);
                    break;
                }
            }
        }
        self.version = version;
        self.text = text;
        applied
    }

    /// Replaces the whole text (a save that includes it) and re-checks.
    pub fn replace_text(&mut self, text: String, files: &dyn Files) {
        self.text = text;
        self.recheck(files);
    }

    /// The URI of a file of this document's analysis: the document itself, a module it
    /// imports, or a materialised standard module.
    pub fn uri_of(&self, file: FileId, stdlib: &StdlibFiles) -> Option<Uri> {
        if file == self.analysis.main {
            return Some(self.uri.clone());
        }
        uri_of_name(&self.analysis.map.get(file)?.name, stdlib)
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

/// The URI of the file an analysis calls `name`: a materialised standard module, or a
/// module read from the disk (an absolute path).
pub fn uri_of_name(name: &str, stdlib: &StdlibFiles) -> Option<Uri> {
    stdlib.uri_of(name).or_else(|| Path::new(name).is_absolute().then(|| convert::file_uri(Path::new(name))).flatten())
}

/// `text` after one content change: a whole new text, or a replacement of a range given
/// in UTF-16 positions (a reversed range is read forwards). A range outside the text
/// leaves it as it was, with the reason.
pub fn apply_change(text: String, change: TextDocumentContentChangeEvent) -> Result<String, (String, String)> {
    let Some(range) = change.range else {
        return Ok(change.text);
    };
    let file = SourceFile { name: String::new(), lines: LineIndex::new(&text), text };
    let (Some(start), Some(end)) = (checked_offset(&file, range.start), checked_offset(&file, range.end)) else {
        let why = format!(
            "the change's range {}:{}-{}:{} is outside the document ({} lines)",
            range.start.line,
            range.start.character,
            range.end.line,
            range.end.character,
            file.lines.line_count()
        );
        return Err((file.text, why));
    };
    let (start, end) = (start.min(end), start.max(end));
    let mut text = file.text;
    text.replace_range(start..end, &change.text);
    Ok(text)
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

    fn applied(text: &str, change: TextDocumentContentChangeEvent) -> String {
        apply_change(text.to_string(), change).expect("the change applies")
    }

    #[test]
    fn incremental_changes_use_utf16_columns() {
        let text = "let a = 1;\n// é𝄞 x\n";
        // `x` is at UTF-16 column 7 of line 1 (`𝄞` counts twice).
        let text = applied(text, edit(Some(((1, 7), (1, 8))), "yz"));
        assert_eq!(text, "let a = 1;\n// é𝄞 yz\n");
        let text = applied(&text, edit(Some(((0, 4), (0, 5))), "b"));
        assert_eq!(text, "let b = 1;\n// é𝄞 yz\n");
        // Insertion at the very end: the empty line after the last newline.
        let text = applied(&text, edit(Some(((2, 0), (2, 0))), "end"));
        assert_eq!(text, "let b = 1;\n// é𝄞 yz\nend");
    }

    /// A range past the last line or inside a UTF-16 pair is refused with the text
    /// unchanged and the reason, never clamped into a silent edit; a column past its
    /// line's end is the line's end, as the protocol says.
    #[test]
    fn changes_outside_the_text_are_refused() {
        let text = "let b = 1;\n// é𝄞 yz\nend";
        for range in [((40, 3), (41, 0)), ((1, 5), (1, 5)), ((2, 0), (3, 0))] {
            let (unchanged, why) = apply_change(text.into(), edit(Some(range), "!")).expect_err("refused");
            assert_eq!(unchanged, text);
            assert!(why.contains("outside the document (3 lines)"), "{why}");
        }
        // The end of a line, and past it.
        assert_eq!(applied(text, edit(Some(((0, 10), (0, 10))), "!")), "let b = 1;!\n// é𝄞 yz\nend");
        assert_eq!(applied(text, edit(Some(((0, 11), (0, 99))), "!")), "let b = 1;!\n// é𝄞 yz\nend");
    }

    #[test]
    fn reversed_ranges_and_full_replacements() {
        let text = applied("abcdef", edit(Some(((0, 4), (0, 1))), "-"));
        assert_eq!(text, "a-ef");
        assert_eq!(applied(&text, edit(None, "new")), "new");
    }

    /// In one `didChange`, the changes before a refused one stay applied, and the ones
    /// after it are not.
    #[test]
    fn a_refused_change_stops_its_notification() {
        let uri: Uri = "file:///a.amp".parse().expect("valid");
        let mut doc = Document::open(uri, 1, "abc".to_string(), &amp_sema::NoFiles);
        let changes = vec![edit(Some(((0, 0), (0, 1))), "x"), edit(Some(((5, 0), (5, 0))), "y"), edit(None, "z")];
        let why = doc.change(2, changes, &amp_sema::NoFiles).expect_err("refused");
        assert!(why.contains("5:0-5:0"), "{why}");
        assert_eq!(doc.text, "xbc");
    }

    #[test]
    fn a_change_re_checks_the_document() {
        let uri: Uri = "file:///a.amp".parse().expect("valid");
        let broken = "model M() { fn forward(x: f32) -> f32 { foo } fn loss(x: f32) -> f32 { x } }";
        let mut doc = Document::open(uri, 1, broken.to_string(), &amp_sema::NoFiles);
        assert!(!doc.diagnostics(&StdlibFiles::none(), None).is_empty());
        let start = u32::try_from(broken.find("foo").expect("present")).expect("small");
        doc.change(2, vec![edit(Some(((0, start), (0, start + 3))), "x")], &amp_sema::NoFiles).expect("applies");
        assert_eq!(doc.version, 2);
        assert!(doc.text.contains("{ x }"));
        assert_eq!(doc.diagnostics(&StdlibFiles::none(), None), Vec::new());
    }
}
