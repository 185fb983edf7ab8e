//! The lines of a data file, read as a stream: every loader (JSON Lines, CSV, PTB, SDF,
//! vocabularies) takes its text as these, from a file ([`open`]) or from bytes in memory
//! ([`Lines::of_bytes`]), so a loader with a limit reads no further than the lines it
//! takes, and memory holds one line at a time (plus what the loader keeps).
//!
//! A line is at most [`MAX_LINE_BYTES`] bytes: a longer one (an endless input such as
//! `/dev/zero`, or a file without newlines) is an error that ends the load, found after
//! reading that many bytes, never more. A UTF-8 byte-order mark at the start of the file
//! is dropped (editors on Windows write one); `\r\n` line ends read as `\n`.

use crate::{DataError, DataErrorKind};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The most bytes one line of a data file may have (256 MiB; docs/limits.md).
pub const MAX_LINE_BYTES: usize = 1 << 28;

/// A line: its 1-based number and its text, or why it is not text.
pub type Line = (usize, Result<String, DataError>);

const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

/// The lines of a reader, each at most [`MAX_LINE_BYTES`] bytes.
pub struct Lines<R> {
    reader: R,
    number: usize,
    done: bool,
    max: usize,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R) -> Lines<R> {
        Lines { reader, number: 0, done: false, max: MAX_LINE_BYTES }
    }

    /// The same with another bound on a line (tests).
    pub fn with_max_line(reader: R, max: usize) -> Lines<R> {
        Lines { reader, number: 0, done: false, max }
    }
}

impl<'t> Lines<&'t [u8]> {
    /// The lines of a text in memory.
    pub fn of_bytes(text: &'t [u8]) -> Lines<&'t [u8]> {
        Lines::new(text)
    }
}

/// The lines of the file at `path`, read as they are taken.
pub fn open(path: &Path) -> Result<Lines<BufReader<std::fs::File>>, DataError> {
    let file = std::fs::File::open(path).map_err(|e| DataError::io(&path.display().to_string(), &e))?;
    Ok(Lines::new(BufReader::new(file)))
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Line;

    fn next(&mut self) -> Option<Line> {
        if self.done {
            return None;
        }
        let mut line = Vec::new();
        let bound = u64::try_from(self.max).unwrap_or(u64::MAX).saturating_add(1);
        let read = (&mut self.reader).take(bound).read_until(b'\n', &mut line);
        let number = self.number + 1;
        match read {
            Ok(0) => {
                self.done = true;
                return None;
            }
            Ok(_) => self.number = number,
            Err(e) => {
                self.done = true;
                return Some((number, Err(DataError::new(DataErrorKind::Io(e.to_string())))));
            }
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if line.len() > self.max {
            // Nothing after it is read: the rest of the line may never end.
            self.done = true;
            let message = format!("the line is longer than {} bytes (the limit of a data line)", self.max);
            return Some((number, Err(DataError::new(DataErrorKind::TooLarge(message)))));
        }
        if number == 1 && line.starts_with(BYTE_ORDER_MARK) {
            line.drain(..BYTE_ORDER_MARK.len());
        }
        let text = String::from_utf8(line).map_err(|e| {
            DataError::syntax(format!("the line is not UTF-8 (byte {})", e.utf8_error().valid_up_to() + 1))
        });
        Some((number, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &[u8]) -> Vec<(usize, Result<String, DataError>)> {
        Lines::of_bytes(text).collect()
    }

    #[test]
    fn lines_are_numbered_without_their_ends_and_a_byte_order_mark() {
        let lines = all(b"\xEF\xBB\xBFa\r\n\nb");
        assert_eq!(lines, vec![(1, Ok("a".into())), (2, Ok(String::new())), (3, Ok("b".into()))]);
        assert_eq!(all(b""), vec![]);
        assert_eq!(all(b"x\n"), vec![(1, Ok("x".into()))]);
        // Only at the start of the file.
        assert_eq!(all(b"a\n\xEF\xBB\xBFb\n")[1], (2, Ok("\u{FEFF}b".into())));
        let (_, bad) = &all(b"ok\n\xFF\n")[1];
        assert!(bad.as_ref().is_err_and(|e| e.to_string().contains("not UTF-8 (byte 1)")));
    }

    #[test]
    fn a_line_past_the_bound_ends_the_lines_after_reading_the_bound() {
        // An endless input: reading stops after the bound (plus one byte).
        let mut endless = std::io::repeat(0).take(u64::MAX);
        let mut lines = Lines::with_max_line(BufReader::new(&mut endless), 1000);
        let (number, error) = lines.next().expect("a line");
        assert_eq!(number, 1);
        let error = error.expect_err("too long");
        assert!(!error.is_skippable());
        assert!(error.to_string().contains("longer than 1000 bytes"), "{error}");
        assert!(lines.next().is_none());
        drop(lines);
        assert!(u64::MAX - endless.limit() <= 1001 + 8192, "read {} bytes", u64::MAX - endless.limit());
        // A line of exactly the bound is a line.
        let text = [vec![b'a'; 1000], b"\n".to_vec()].concat();
        let lines: Vec<_> = Lines::with_max_line(&text[..], 1000).collect();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].1.as_ref().is_ok_and(|l| l.len() == 1000));
    }
}
