//! Files, spans and byte-offset to line/column conversion.

use std::ops::Range;

/// Index of a file in a [`SourceMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FileId(pub u32);

/// A byte range in one file. Small and `Copy`: every AST and IR node carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Span {
    pub file: FileId,
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(file: FileId, start: usize, end: usize) -> Self {
        Span { file, start: clamp_u32(start), end: clamp_u32(end.max(start)) }
    }

    /// The smallest span covering both (which must lie in the same file).
    pub fn to(self, other: Span) -> Span {
        Span { file: self.file, start: self.start.min(other.start), end: self.end.max(other.end) }
    }

    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn contains(self, offset: usize) -> bool {
        (self.start as usize) <= offset && offset <= self.end as usize
    }

    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

fn clamp_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Start offsets of every line of a text, for offset -> (line, column) conversion.
#[derive(Clone, Debug)]
pub struct LineIndex {
    line_starts: Vec<usize>,
    /// Per line, whether it is all ASCII: then a column is its byte offset from the line's
    /// start, in chars and in UTF-16 units alike. Without it, every position on a long line
    /// counted from the line's start, and thousands of diagnostics on one line cost the
    /// square of its length.
    ascii: Vec<bool>,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        let ascii = line_starts
            .iter()
            .enumerate()
            .map(|(line, &start)| {
                let end = line_starts.get(line + 1).copied().unwrap_or(text.len());
                text.as_bytes().get(start..end).is_some_and(<[u8]>::is_ascii)
            })
            .collect();
        LineIndex { line_starts, ascii }
    }

    /// Whether 0-based `line` is all ASCII.
    pub fn is_ascii(&self, line: usize) -> bool {
        self.ascii.get(line).copied().unwrap_or(false)
    }

    /// 0-based line of a byte offset.
    pub fn line_of(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(line) => line,
            Err(next) => next - 1,
        }
    }

    pub fn line_start(&self, line: usize) -> usize {
        self.line_starts.get(line).copied().unwrap_or(0)
    }

    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }
}

/// One source file: its display name and its text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    pub lines: LineIndex,
}

impl SourceFile {
    /// Clamps `offset` into the text and back onto a char boundary.
    pub fn clamp_offset(&self, offset: usize) -> usize {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        offset
    }

    /// 0-based line and 0-based column counted in Unicode scalar values.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = self.clamp_offset(offset);
        let line = self.lines.line_of(offset);
        let start = self.lines.line_start(line);
        if self.lines.is_ascii(line) {
            return (line, offset - start);
        }
        (line, self.text[start..offset].chars().count())
    }

    /// 0-based line and 0-based column counted in UTF-16 code units (what LSP wants).
    pub fn line_col_utf16(&self, offset: usize) -> (usize, usize) {
        let offset = self.clamp_offset(offset);
        let line = self.lines.line_of(offset);
        let start = self.lines.line_start(line);
        if self.lines.is_ascii(line) {
            return (line, offset - start);
        }
        (line, self.text[start..offset].encode_utf16().count())
    }

    /// Byte offset of a 0-based line and UTF-16 column; past-the-end positions clamp.
    pub fn offset_of_utf16(&self, line: usize, col16: usize) -> usize {
        if line >= self.lines.line_count() {
            return self.text.len();
        }
        let start = self.lines.line_start(line);
        if self.lines.is_ascii(line) {
            // The line ends at its `\n` (or the text's end), as below.
            let next =
                if line + 1 < self.lines.line_count() { self.lines.line_start(line + 1) - 1 } else { self.text.len() };
            return start + col16.min(next.saturating_sub(start));
        }
        let mut units = 0;
        for (i, ch) in self.text[start..].char_indices() {
            if units >= col16 || ch == '\n' {
                return start + i;
            }
            units += ch.len_utf16();
        }
        self.text.len()
    }

    pub fn slice(&self, span: Span) -> &str {
        let start = self.clamp_offset(span.start as usize);
        let end = self.clamp_offset(span.end as usize).max(start);
        &self.text[start..end]
    }
}

/// All files of one compilation: the user's files and the embedded standard library.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        let text = text.into();
        let lines = LineIndex::new(&text);
        self.files.push(SourceFile { name: name.into(), text, lines });
        FileId(clamp_u32(self.files.len() - 1))
    }

    pub fn get(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id.0 as usize)
    }

    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files.iter().enumerate().map(|(i, f)| (FileId(clamp_u32(i)), f))
    }

    pub fn find(&self, name: &str) -> Option<FileId> {
        self.files().find(|(_, f)| f.name == name).map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_columns_count_chars_and_utf16_units() {
        let mut map = SourceMap::new();
        let id = map.add("a.amp", "ab\n// é𝄞x\nz");
        let file = map.get(id).unwrap();
        let x = file.text.find('x').unwrap();
        assert_eq!(file.line_col(x), (1, 5));
        assert_eq!(file.line_col_utf16(x), (1, 6));
        assert_eq!(file.offset_of_utf16(1, 6), x);
        assert_eq!(file.offset_of_utf16(2, 0), file.text.find('z').unwrap());
        assert_eq!(file.offset_of_utf16(9, 0), file.text.len());
        // An offset inside a multi-byte char is clamped back to its start.
        assert_eq!(file.line_col(file.text.find('é').unwrap() + 1), (1, 3));
    }

    /// The ASCII lines' shortcut gives what counting from the line's start gives, at every
    /// offset and for columns past a line's end, on lines that end in `\n`, `\r\n` or the
    /// text's end, next to lines that are not ASCII.
    #[test]
    fn ascii_lines_convert_as_counting_does() {
        for text in ["ab\r\n\n// é𝄞x\nlet y = 1;\n", "", "x", "é\nabc", "abc\né", "\n\n"] {
            let mut map = SourceMap::new();
            let id = map.add("a.amp", text);
            let file = map.get(id).unwrap();
            for offset in 0..=text.len() + 2 {
                let clamped = file.clamp_offset(offset);
                let line = file.lines.line_of(clamped);
                let start = file.lines.line_start(line);
                assert_eq!(file.line_col(offset), (line, text[start..clamped].chars().count()), "{text:?} {offset}");
                assert_eq!(file.line_col_utf16(offset), (line, text[start..clamped].encode_utf16().count()));
            }
            for line in 0..file.lines.line_count() + 1 {
                for col in 0..8 {
                    let start = file.lines.line_start(line);
                    let counted = if line >= file.lines.line_count() {
                        text.len()
                    } else {
                        let mut units = 0;
                        let mut found = text.len();
                        for (i, ch) in text[start..].char_indices() {
                            if units >= col || ch == '\n' {
                                found = start + i;
                                break;
                            }
                            units += ch.len_utf16();
                        }
                        found
                    };
                    assert_eq!(file.offset_of_utf16(line, col), counted, "{text:?} line {line} col {col}");
                }
            }
        }
    }
}
