//! Conversions between Amp's values and LSP's: byte spans to (line, UTF-16 column)
//! positions and back, Amp diagnostics to LSP diagnostics, paths to `file://` URIs.
//! Pure: no IO and no server state, so every rule here has a unit test.
//!
//! LSP counts columns in UTF-16 code units (the default `positionEncoding`, the only one
//! this server announces): `𝄞` is one char, four UTF-8 bytes and two UTF-16 units. Amp's
//! spans are byte offsets; [`SourceFile::line_col_utf16`] and
//! [`SourceFile::offset_of_utf16`] do the counting, this module only wraps them.

use amp_diagnostics::{Code, Diagnostic, FileId, Severity, SourceFile, SourceMap, Span};
use lsp_types as lsp;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What the client shows as the diagnostic's origin.
const SOURCE: &str = "ampc";

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The LSP position of a byte offset (clamped into the text).
pub fn position_of(file: &SourceFile, offset: usize) -> lsp::Position {
    let (line, column) = file.line_col_utf16(offset);
    lsp::Position::new(to_u32(line), to_u32(column))
}

pub fn range_of(file: &SourceFile, span: Span) -> lsp::Range {
    lsp::Range::new(position_of(file, span.start as usize), position_of(file, span.end as usize))
}

/// The byte offset of an LSP position; positions past a line's end or past the last line
/// clamp to the end of that line or of the text, as the protocol asks.
pub fn offset_of(file: &SourceFile, position: lsp::Position) -> usize {
    file.offset_of_utf16(position.line as usize, position.character as usize)
}

/// The byte offset of an LSP position in the text: `None` for a line past the last one or
/// a column inside a character's UTF-16 pair, which requests and changes are refused for
/// (the editor's text and the server's differ). A column past its line's end is the end
/// of the line, as the protocol says.
pub fn checked_offset(file: &SourceFile, position: lsp::Position) -> Option<usize> {
    let (line, column) = (position.line as usize, position.character as usize);
    if line >= file.lines.line_count() {
        return None;
    }
    if column >= line_length_utf16(file, line) {
        return Some(file.offset_of_utf16(line, usize::MAX));
    }
    let offset = file.offset_of_utf16(line, column);
    (file.line_col_utf16(offset) == (line, column)).then_some(offset)
}

/// A line's length in UTF-16 units, without its newline.
pub fn line_length_utf16(file: &SourceFile, line: usize) -> usize {
    file.line_col_utf16(file.offset_of_utf16(line, usize::MAX)).1
}

/// The page that explains `code`, `<base>/<CODE>.md`, where `base` is the URL of a copy
/// of `docs/errors` (see [`crate::server`] for where it comes from).
pub fn error_page(base: &str, code: Code) -> Option<lsp::Uri> {
    format!("{}/{}.md", base.trim_end_matches('/'), code.as_str()).parse().ok()
}

/// The diagnostic's text as one message: LSP has no separate notes or help, so they
/// follow the message on lines of their own, as `ampc check` prints them.
pub fn message_of(diagnostic: &Diagnostic) -> String {
    let mut message = diagnostic.message.clone();
    if !diagnostic.primary_label.is_empty() {
        message.push('\n');
        message.push_str(&diagnostic.primary_label);
    }
    for note in &diagnostic.notes {
        let _ = write!(message, "\nnote: {note}");
    }
    if let Some(help) = &diagnostic.help {
        let _ = write!(message, "\nhelp: {help}");
    }
    message
}

fn severity_of(severity: Severity) -> lsp::DiagnosticSeverity {
    match severity {
        Severity::Error => lsp::DiagnosticSeverity::ERROR,
        Severity::Warning => lsp::DiagnosticSeverity::WARNING,
    }
}

/// Editors fade code that is reported as unused or unreachable.
fn tags_of(code: Code) -> Option<Vec<lsp::DiagnosticTag>> {
    match code {
        Code::UnusedVariable | Code::UnusedParam | Code::UnusedImport | Code::UnreachableArm => {
            Some(vec![lsp::DiagnosticTag::UNNECESSARY])
        }
        _ => None,
    }
}

/// The location of `span`, if its file has a URI.
pub fn location_of(map: &SourceMap, span: Span, uri_of: &dyn Fn(FileId) -> Option<lsp::Uri>) -> Option<lsp::Location> {
    let file = map.get(span.file)?;
    Some(lsp::Location::new(uri_of(span.file)?, range_of(file, span)))
}

/// The LSP form of `diagnostic`. Secondary labels become related information (those in
/// files without a URI are dropped); `None` if the primary span's file is not in `map`.
/// The code links to its page under `error_pages` when there is one.
pub fn to_lsp_diagnostic(
    diagnostic: &Diagnostic,
    map: &SourceMap,
    uri_of: &dyn Fn(FileId) -> Option<lsp::Uri>,
    error_pages: Option<&str>,
) -> Option<lsp::Diagnostic> {
    let file = map.get(diagnostic.span.file)?;
    let related: Vec<lsp::DiagnosticRelatedInformation> = diagnostic
        .labels
        .iter()
        .filter_map(|label| {
            Some(lsp::DiagnosticRelatedInformation {
                location: location_of(map, label.span, uri_of)?,
                message: label.message.clone(),
            })
        })
        .collect();
    Some(lsp::Diagnostic {
        range: range_of(file, diagnostic.span),
        severity: Some(severity_of(diagnostic.severity())),
        code: Some(lsp::NumberOrString::String(diagnostic.code.as_str().to_string())),
        code_description: error_pages
            .and_then(|base| error_page(base, diagnostic.code))
            .map(|href| lsp::CodeDescription { href }),
        source: Some(SOURCE.to_string()),
        message: message_of(diagnostic),
        related_information: (!related.is_empty()).then_some(related),
        tags: tags_of(diagnostic.code),
        data: None,
    })
}

/// The `file://` URI of an absolute path, percent-encoding everything but unreserved
/// characters and separators. `None` for paths that are not UTF-8.
pub fn file_uri(path: &Path) -> Option<lsp::Uri> {
    let text = path.to_str()?.replace('\\', "/");
    let mut uri = String::from("file://");
    if !text.starts_with('/') {
        // A Windows path `C:/...` becomes `file:///C:/...`.
        uri.push('/');
    }
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b':' => {
                uri.push(char::from(byte));
            }
            _ => {
                let _ = write!(uri, "%{byte:02X}");
            }
        }
    }
    uri.parse().ok()
}

/// The local path a `file://` URI names.
pub fn file_path(uri: &lsp::Uri) -> Option<PathBuf> {
    path_of_file_uri(uri.as_str())
}

/// The local path of a `file://` URI, percent-decoded; `None` for other schemes, hosts
/// other than empty or `localhost`, and escapes that do not decode to UTF-8.
pub fn path_of_file_uri(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = path.get(i + 1..i + 3)?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(decoded).ok()?;
    // `file:///C:/x` on Windows.
    let text = match text.as_bytes() {
        [b'/', drive, b':', ..] if drive.is_ascii_alphabetic() => text[1..].to_string(),
        _ => text,
    };
    Some(PathBuf::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use amp_diagnostics::Label;

    fn one_file(text: &str) -> (SourceMap, FileId) {
        let mut map = SourceMap::new();
        let id = map.add("test.amp", text);
        (map, id)
    }

    fn uri(text: &str) -> lsp::Uri {
        text.parse().expect("a valid test URI")
    }

    #[test]
    fn positions_count_utf16_units_after_non_ascii_comments() {
        // `é` is one UTF-16 unit, `𝄞` two: `x` sits at char column 5 but UTF-16 column 6.
        let (map, id) = one_file("ab\n// é𝄞x\nz");
        let file = map.get(id).expect("the file just added");
        let x = file.text.find('x').expect("x is in the text");
        assert_eq!(position_of(file, x), lsp::Position::new(1, 6));
        assert_eq!(offset_of(file, lsp::Position::new(1, 6)), x);
        // A column inside the surrogate pair of `𝄞` lands on a char boundary.
        let inside = offset_of(file, lsp::Position::new(1, 5));
        assert!(file.text.is_char_boundary(inside));
        // Past the end of a line clamps to its end; past the last line to the text's end.
        assert_eq!(offset_of(file, lsp::Position::new(0, 99)), 2);
        assert_eq!(offset_of(file, lsp::Position::new(9, 0)), file.text.len());
    }

    #[test]
    fn diagnostic_ranges_use_utf16_columns() {
        let text = "model M() {\n    fn forward(x: f32) -> f32 { /* é𝄞 */ foo }\n}\n";
        let (map, checked) = amp_sema::check_source("m.amp", text, &Default::default());
        let unknown = checked.diagnostics.iter().find(|d| d.code == Code::UnknownName).expect("`foo` is unknown");
        let main_uri = uri("file:///m.amp");
        let converted =
            to_lsp_diagnostic(unknown, &map, &|_| Some(main_uri.clone()), None).expect("the span's file is in the map");
        let line = text.lines().nth(1).expect("two lines");
        let byte_column = line.find("foo").expect("foo on line 2");
        // `é` takes 2 bytes and 1 unit, `𝄞` 4 bytes and 2 units: 3 fewer units than bytes.
        let column = u32::try_from(byte_column - 3).expect("small");
        assert_eq!(converted.range, lsp::Range::new(lsp::Position::new(1, column), lsp::Position::new(1, column + 3)));
        assert_eq!(converted.code, Some(lsp::NumberOrString::String("E0100".into())));
        assert_eq!(converted.severity, Some(lsp::DiagnosticSeverity::ERROR));
    }

    #[test]
    fn diagnostics_carry_code_page_notes_help_and_related_labels() {
        let (map, id) = one_file("let a = 1;\nlet b = a;\n");
        let diagnostic = Diagnostic::new(Code::LinearInputShape, Span::new(id, 19, 20), "input shape does not fit")
            .with_primary("this is `f32[5]`")
            .with_label(Span::new(id, 4, 5), "declared here")
            .with_label(Span::new(FileId(7), 0, 1), "in a file without a URI")
            .with_note("a note")
            .with_help("a help");
        let main_uri = uri("file:///a.amp");
        let uri_of = |file: FileId| (file == id).then(|| main_uri.clone());
        let pages = Some("file:///src/amp/docs/errors/");
        let converted = to_lsp_diagnostic(&diagnostic, &map, &uri_of, pages).expect("known file");
        assert_eq!(converted.message, "input shape does not fit\nthis is `f32[5]`\nnote: a note\nhelp: a help");
        assert_eq!(
            converted.code_description.map(|c| c.href.as_str().to_string()),
            Some("file:///src/amp/docs/errors/E0301.md".to_string())
        );
        let related = converted.related_information.expect("one label has a URI");
        assert_eq!(related.len(), 1);
        assert_eq!(related[0].message, "declared here");
        assert_eq!(related[0].location.range, lsp::Range::new(lsp::Position::new(0, 4), lsp::Position::new(0, 5)));
        assert_eq!(converted.range.start, lsp::Position::new(1, 8));
    }

    #[test]
    fn unused_warnings_are_tagged_unnecessary() {
        let (map, id) = one_file("let y = 1;");
        let warning = Diagnostic::new(Code::UnusedVariable, Span::new(id, 4, 5), "unused");
        let main_uri = uri("file:///a.amp");
        let converted = to_lsp_diagnostic(&warning, &map, &|_| Some(main_uri.clone()), None).expect("known file");
        assert_eq!(converted.severity, Some(lsp::DiagnosticSeverity::WARNING));
        assert_eq!(converted.tags, Some(vec![lsp::DiagnosticTag::UNNECESSARY]));
        assert_eq!(converted.related_information, None);
        assert_eq!(converted.code_description, None, "no pages, no link");
    }

    #[test]
    fn file_uris_percent_encode_odd_characters() {
        let plain = file_uri(Path::new("/tmp/amp-stdlib/0.1.0/nn.amp")).expect("UTF-8");
        assert_eq!(plain.as_str(), "file:///tmp/amp-stdlib/0.1.0/nn.amp");
        let odd = file_uri(Path::new("/tmp/my dir/é#1.amp")).expect("UTF-8");
        assert_eq!(odd.as_str(), "file:///tmp/my%20dir/%C3%A9%231.amp");
        let windows = file_uri(Path::new(r"C:\Temp\nn.amp")).expect("UTF-8");
        assert_eq!(windows.as_str(), "file:///C:/Temp/nn.amp");
    }

    #[test]
    fn file_paths_are_file_uris_decoded() {
        for path in ["/tmp/amp-stdlib/0.1.0/nn.amp", "/tmp/my dir/é#1.amp", "C:/Temp/nn.amp"] {
            let uri = file_uri(Path::new(path)).expect("UTF-8");
            assert_eq!(file_path(&uri).as_deref(), Some(Path::new(path)), "{}", uri.as_str());
        }
        for other in ["untitled:Untitled-1", "file://server/share/a.amp", "file:///bad%FF.amp"] {
            assert_eq!(file_path(&uri(other)), None, "{other}");
        }
    }

    #[test]
    fn every_code_has_a_page_url() {
        for &code in Code::ALL {
            let page = error_page("https://amp.example/docs/errors", code).expect("a valid URL");
            assert!(page.as_str().ends_with(&format!("/{}.md", code.as_str())));
        }
    }

    #[test]
    fn labels_outside_the_map_are_dropped_not_panicking() {
        let (map, id) = one_file("x");
        let diagnostic = Diagnostic {
            labels: vec![Label { span: Span::new(FileId(3), 0, 1), message: "elsewhere".into() }],
            ..Diagnostic::new(Code::UnknownName, Span::new(id, 0, 1), "unknown")
        };
        let converted = to_lsp_diagnostic(&diagnostic, &map, &|_| None, None);
        assert!(converted.is_some(), "the primary file is known even without a URI for labels");
        let missing = Diagnostic::new(Code::UnknownName, Span::new(FileId(5), 0, 1), "x");
        assert!(to_lsp_diagnostic(&missing, &map, &|_| None, None).is_none());
    }

    #[test]
    fn file_uris_decode_to_paths() {
        assert_eq!(path_of_file_uri("file:///tmp/my%20dir/%C3%A9"), Some(PathBuf::from("/tmp/my dir/é")));
        assert_eq!(path_of_file_uri("file://localhost/tmp"), Some(PathBuf::from("/tmp")));
        assert_eq!(path_of_file_uri("file:///C:/Temp"), Some(PathBuf::from("C:/Temp")));
        assert_eq!(path_of_file_uri("https://x/y"), None);
        assert_eq!(path_of_file_uri("file:///bad%zz"), None);
        assert_eq!(path_of_file_uri("file:///bad%ff"), None);
        assert_eq!(path_of_file_uri("file:///cut%2"), None);
    }
}
