//! The character-level reader under the text-form parser: one line at a time, with the
//! token shapes the form uses (identifiers, symbols, strings, unsigned numbers).
//!
//! The form is line based and some tokens depend on their position (`.len()` is a path
//! step, `layers.0.weight` is one name), so the parser reads characters directly instead
//! of going through a separate lexer. Every read is bounds-checked: nothing here panics.

use std::fmt;
use std::str::FromStr;

/// Why some text is not a graph, and where: 1-based line and column (in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

pub(crate) type PResult<T> = Result<T, ParseError>;

/// A position in one line of the input.
pub(crate) struct Cursor {
    line: usize,
    chars: Vec<char>,
    pos: usize,
}

impl Cursor {
    pub(crate) fn new(line: usize, text: &str) -> Cursor {
        Cursor { line, chars: text.chars().collect(), pos: 0 }
    }

    pub(crate) fn line(&self) -> usize {
        self.line
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Goes back to an earlier position of the same line.
    pub(crate) fn reset(&mut self, pos: usize) {
        self.pos = pos.min(self.chars.len());
    }

    pub(crate) fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        ParseError { line: self.line, col: pos + 1, message: message.into() }
    }

    pub(crate) fn error(&self, message: impl Into<String>) -> ParseError {
        self.error_at(self.pos, message)
    }

    /// An error naming what was expected and what is there instead.
    pub(crate) fn expected(&self, what: &str) -> ParseError {
        match self.chars.get(self.pos) {
            Some(c) => self.error(format!("expected {what}, found `{c}`")),
            None => self.error(format!("expected {what}, found the end of the line")),
        }
    }

    pub(crate) fn skip_spaces(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    /// The next character after spaces, without consuming it.
    pub(crate) fn peek(&mut self) -> Option<char> {
        self.skip_spaces();
        self.chars.get(self.pos).copied()
    }

    /// The character right at the cursor (no space skipping).
    pub(crate) fn peek_here(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos.checked_add(offset)?).copied()
    }

    pub(crate) fn bump(&mut self) {
        if self.pos < self.chars.len() {
            self.pos += 1;
        }
    }

    /// Consumes `s` (after spaces) when it comes next.
    pub(crate) fn eat(&mut self, s: &str) -> bool {
        self.skip_spaces();
        let mut end = self.pos;
        for c in s.chars() {
            if self.chars.get(end) != Some(&c) {
                return false;
            }
            end += 1;
        }
        self.pos = end;
        true
    }

    pub(crate) fn expect(&mut self, s: &str) -> PResult<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{s}`")))
        }
    }

    /// Consumes the keyword `word` when it comes next as a whole identifier.
    pub(crate) fn eat_word(&mut self, word: &str) -> bool {
        // Spaces stay skipped when the word is not there, so an error points at what is.
        self.skip_spaces();
        let start = self.pos;
        if self.eat(word) && !self.chars.get(self.pos).is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_') {
            return true;
        }
        self.pos = start;
        false
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`, after spaces.
    pub(crate) fn identifier(&mut self) -> Option<String> {
        self.skip_spaces();
        let first = *self.chars.get(self.pos)?;
        if !(first.is_ascii_alphabetic() || first == '_') {
            return None;
        }
        Some(self.take_while(|c| c.is_ascii_alphanumeric() || c == '_'))
    }

    pub(crate) fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let start = self.pos;
        while self.chars.get(self.pos).is_some_and(|c| keep(*c)) {
            self.pos += 1;
        }
        self.chars.get(start..self.pos).map_or_else(String::new, |s| s.iter().collect())
    }

    /// A bare name (`cell`, `layers.0.weight`) or a quoted string.
    pub(crate) fn symbol(&mut self) -> PResult<String> {
        match self.peek() {
            Some('"') => self.string(),
            Some(c) if super::is_symbol_char(c) => Ok(self.take_while(super::is_symbol_char)),
            _ => Err(self.expected("a name")),
        }
    }

    /// An identifier or a quoted string (state field names and data path fields).
    pub(crate) fn name(&mut self, what: &str) -> PResult<String> {
        if self.peek() == Some('"') {
            return self.string();
        }
        self.identifier().ok_or_else(|| self.expected(what))
    }

    /// A double-quoted string with the escapes [`super::quote`] writes.
    pub(crate) fn string(&mut self) -> PResult<String> {
        self.skip_spaces();
        let open = self.pos;
        if self.chars.get(self.pos) != Some(&'"') {
            return Err(self.expected("a string"));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(&c) = self.chars.get(self.pos) else {
                return Err(self.error_at(open, "unterminated string"));
            };
            self.pos += 1;
            match c {
                '"' => return Ok(out),
                '\\' => out.push(self.escape()?),
                c => out.push(c),
            }
        }
    }

    fn escape(&mut self) -> PResult<char> {
        let at = self.pos.saturating_sub(1);
        let Some(&c) = self.chars.get(self.pos) else {
            return Err(self.error_at(at, "unterminated escape"));
        };
        self.pos += 1;
        Ok(match c {
            '"' => '"',
            '\\' => '\\',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                if self.chars.get(self.pos) != Some(&'{') {
                    return Err(self.error_at(at, "expected `{` after `\\u`"));
                }
                self.pos += 1;
                let hex = self.take_while(|c| c.is_ascii_hexdigit());
                if self.chars.get(self.pos) != Some(&'}') || hex.is_empty() || hex.len() > 6 {
                    return Err(self.error_at(at, "bad `\\u{...}` escape"));
                }
                self.pos += 1;
                u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| self.error_at(at, "`\\u{...}` is not a character"))?
            }
            other => return Err(self.error_at(at, format!("unknown escape `\\{other}`"))),
        })
    }

    /// An unsigned decimal that fits `T`.
    pub(crate) fn number<T: FromStr>(&mut self, what: &str) -> PResult<T> {
        self.skip_spaces();
        let start = self.pos;
        let digits = self.take_while(|c| c.is_ascii_digit());
        if digits.is_empty() {
            return Err(self.expected(what));
        }
        digits.parse().map_err(|_| self.error_at(start, format!("{what} `{digits}` is out of range")))
    }

    /// Fails unless only spaces remain on the line.
    pub(crate) fn finish(&mut self) -> PResult<()> {
        match self.peek() {
            None => Ok(()),
            Some(c) => Err(self.error(format!("unexpected `{c}` at the end of the line"))),
        }
    }
}
