//! Framing: a block of `Name: value` header lines ended by an empty line, then exactly
//! `Content-Length` bytes of body.
//!
//! The bytes come from a client we do not trust to be correct, so every read is bounded:
//! a header line is at most [`MAX_HEADER_LINE`] bytes, a block at most
//! [`MAX_HEADER_LINES`] lines, and a body at most [`MAX_CONTENT_LENGTH`] bytes. A body
//! is read into memory only when its announced length is within the limit, and its buffer
//! grows with the bytes that actually arrive, not with the length a header claims.
//!
//! A header block that cannot frame a body (no or a malformed `Content-Length`, one above
//! the limit, a line or block too long) is refused, and the reader then skips to the next
//! `Content-Length:` and goes on from there. The skip starts inside the refused block (it
//! is kept, at most [`MAX_HEADER_LINES`] bounded lines, and read again), just past its
//! last `Content-Length` line or else its first byte, so that junk glued to the front of
//! a header (`junkContent-Length: 52`) costs only the junk. `Content-Length:` cannot occur
//! inside a well-formed JSON body except within a string, so an honest client's next
//! message is found again after any one bad message.

use std::fmt;
use std::io::{self, BufRead, Read};

/// The largest body the server accepts: far above any real document (a 50,000-line
/// file is a few MB even with JSON escaping), far below what would exhaust memory.
pub const MAX_CONTENT_LENGTH: usize = 32 * 1024 * 1024;

/// The longest header line, newline included; real ones are under 100 bytes.
pub const MAX_HEADER_LINE: usize = 4096;

/// The most lines in one header block, its closing empty line included.
pub const MAX_HEADER_LINES: usize = 32;

/// What a body's buffer starts with: enough for most messages, without trusting the
/// announced length before its bytes arrive.
const INITIAL_BODY_CAPACITY: usize = 64 * 1024;

/// The header the reader looks for after a refused block, lowercase (matched ignoring
/// case). Its first byte does not occur again in it, which keeps the scan simple.
const CONTENT_LENGTH: &[u8] = b"content-length:";

/// One unit read from the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A body of exactly the announced length (not yet known to be JSON).
    Body(Vec<u8>),
    /// A header block that frames no body; the next frame starts at the next
    /// `Content-Length:`.
    Refused(Refusal),
}

/// Why a header block framed no body.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    LineTooLong,
    TooManyLines,
    NoContentLength,
    /// The value is not a decimal number (shown, cut short).
    BadContentLength(String),
    /// Two `Content-Length` headers that disagree.
    ConflictingLengths,
    /// Above [`MAX_CONTENT_LENGTH`]; `None` when it does not even fit in 64 bits.
    TooLarge(Option<u64>),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::LineTooLong => write!(f, "a header line longer than {MAX_HEADER_LINE} bytes"),
            Refusal::TooManyLines => write!(f, "a header block of more than {MAX_HEADER_LINES} lines"),
            Refusal::NoContentLength => f.write_str("a header block without `Content-Length`"),
            Refusal::BadContentLength(value) => write!(f, "`Content-Length: {value}` is not a length"),
            Refusal::ConflictingLengths => f.write_str("two different `Content-Length` headers"),
            Refusal::TooLarge(Some(length)) => {
                write!(f, "`Content-Length: {length}` is above the limit of {MAX_CONTENT_LENGTH} bytes")
            }
            Refusal::TooLarge(None) => {
                write!(f, "a `Content-Length` far above the limit of {MAX_CONTENT_LENGTH} bytes")
            }
        }
    }
}

/// Reads frames from a byte stream, resynchronising after refused header blocks.
pub struct FrameReader<R> {
    input: Replay<R>,
    /// The previous block was refused: skip to the next `Content-Length:` first.
    resync: bool,
}

/// A stream with bytes put back in front of it: the part of a refused header block that
/// is scanned again.
struct Replay<R> {
    pending: Vec<u8>,
    at: usize,
    inner: R,
}

impl<R: BufRead> Replay<R> {
    /// Puts `bytes` back in front of what is left to read.
    fn put_back(&mut self, bytes: &[u8]) {
        let mut pending = bytes.to_vec();
        pending.extend_from_slice(&self.pending[self.at..]);
        self.pending = pending;
        self.at = 0;
    }
}

impl<R: BufRead> io::Read for Replay<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Replay<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at < self.pending.len() {
            Ok(&self.pending[self.at..])
        } else {
            self.inner.fill_buf()
        }
    }

    fn consume(&mut self, amount: usize) {
        if self.at < self.pending.len() {
            self.at = (self.at + amount).min(self.pending.len());
            if self.at == self.pending.len() {
                self.pending.clear();
                self.at = 0;
            }
        } else {
            self.inner.consume(amount);
        }
    }
}

/// How a bounded line read ended.
enum LineEnd {
    Complete,
    TooLong,
    Eof,
}

/// How a header block ended.
enum Headers {
    Length(usize),
    Refused(Refusal),
    Eof,
}

impl<R: BufRead> FrameReader<R> {
    pub fn new(input: R) -> Self {
        FrameReader { input: Replay { pending: Vec::new(), at: 0, inner: input }, resync: false }
    }

    /// The next frame; `None` at the end of the stream (a frame cut short by it is
    /// dropped: its rest will never come).
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        let mut first_line = Vec::new();
        if std::mem::take(&mut self.resync) {
            if !self.skip_to_content_length()? {
                return Ok(None);
            }
            // The scan consumed the header's name; the rest of its line follows.
            first_line.extend_from_slice(CONTENT_LENGTH);
        }
        match self.read_headers(first_line)? {
            Headers::Eof => Ok(None),
            Headers::Refused(refusal) => {
                self.resync = true;
                Ok(Some(Frame::Refused(refusal)))
            }
            Headers::Length(length) => {
                let mut body = Vec::with_capacity(length.min(INITIAL_BODY_CAPACITY));
                // `length` is at most MAX_CONTENT_LENGTH, so it fits in a u64.
                let wanted = u64::try_from(length).unwrap_or(u64::MAX);
                (&mut self.input).take(wanted).read_to_end(&mut body)?;
                if body.len() < length {
                    return Ok(None);
                }
                Ok(Some(Frame::Body(body)))
            }
        }
    }

    /// Reads one header block; `block` holds what is already known of its first line.
    /// A refused block is put back from where the next header may start.
    fn read_headers(&mut self, mut block: Vec<u8>) -> io::Result<Headers> {
        let mut length: Option<usize> = None;
        let mut refusal: Option<Refusal> = None;
        // Where a rescan of this block would start: past a header already read (the
        // scan's own `Content-Length:`, or a line read as one), never at its first byte.
        let mut rescan_from = block.len().max(1);
        let mut outcome = Headers::Refused(Refusal::TooManyLines);
        for index in 0..MAX_HEADER_LINES {
            // The first line starts with what `block` already holds.
            let line_start = if index == 0 { 0 } else { block.len() };
            match read_line_bounded(&mut self.input, &mut block, line_start + MAX_HEADER_LINE)? {
                LineEnd::Eof => return Ok(Headers::Eof),
                LineEnd::TooLong => {
                    outcome = Headers::Refused(Refusal::LineTooLong);
                    break;
                }
                LineEnd::Complete => {}
            }
            // The protocol ends lines with `\r\n`; a bare `\n` is accepted too.
            let line = &block[line_start..];
            let text = line.strip_suffix(b"\n").unwrap_or(line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.is_empty() {
                outcome = match (refusal, length) {
                    (Some(refusal), _) => Headers::Refused(refusal),
                    (None, None) => Headers::Refused(Refusal::NoContentLength),
                    (None, Some(length)) => return Ok(Headers::Length(length)),
                };
                break;
            }
            // Other headers (`Content-Type`) and lines without a colon carry nothing the
            // server needs; only the length decides the framing.
            let Some(colon) = text.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&text[..colon], &text[colon + 1..]);
            if !name.trim_ascii().eq_ignore_ascii_case(b"content-length") {
                continue;
            }
            rescan_from = block.len();
            match parse_length(value.trim_ascii()) {
                Ok(parsed) if length.is_some_and(|known| known != parsed) => {
                    refusal.get_or_insert(Refusal::ConflictingLengths);
                }
                Ok(parsed) => length = Some(parsed),
                Err(why) => {
                    refusal.get_or_insert(why);
                }
            }
        }
        if let Some(rest) = block.get(rescan_from..) {
            self.input.put_back(rest);
        }
        Ok(outcome)
    }

    /// Consumes bytes up to and including the next `Content-Length:` (any case); `false`
    /// at the end of the stream. Memory stays constant however far it has to go.
    fn skip_to_content_length(&mut self) -> io::Result<bool> {
        let mut matched = 0;
        loop {
            let available = match self.input.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(false);
            }
            let mut used = 0;
            let mut found = false;
            for &byte in available {
                used += 1;
                let byte = byte.to_ascii_lowercase();
                if byte == CONTENT_LENGTH[matched] {
                    matched += 1;
                } else {
                    // The first byte of the header does not recur in it, so a mismatch
                    // can only restart a match at this byte.
                    matched = usize::from(byte == CONTENT_LENGTH[0]);
                }
                if matched == CONTENT_LENGTH.len() {
                    found = true;
                    break;
                }
            }
            self.input.consume(used);
            if found {
                return Ok(true);
            }
        }
    }
}

/// A `Content-Length` value: decimal digits only, within [`MAX_CONTENT_LENGTH`].
fn parse_length(value: &[u8]) -> Result<usize, Refusal> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        let shown: String = String::from_utf8_lossy(value).chars().take(40).collect();
        return Err(Refusal::BadContentLength(shown));
    }
    // All digits, so the only way parsing fails is a number beyond u64.
    let length = std::str::from_utf8(value).ok().and_then(|digits| digits.parse::<u64>().ok());
    match length {
        Some(length) => match usize::try_from(length) {
            Ok(length) if length <= MAX_CONTENT_LENGTH => Ok(length),
            _ => Err(Refusal::TooLarge(Some(length))),
        },
        None => Err(Refusal::TooLarge(None)),
    }
}

/// Appends bytes of `input` to `line` up to and including a newline, never letting `line`
/// grow past `limit` bytes.
fn read_line_bounded(input: &mut impl BufRead, line: &mut Vec<u8>, limit: usize) -> io::Result<LineEnd> {
    loop {
        let available = match input.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(LineEnd::Eof);
        }
        let (take, complete) = match available.iter().position(|&b| b == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (available.len(), false),
        };
        let room = limit.saturating_sub(line.len());
        if take > room {
            line.extend_from_slice(&available[..room]);
            input.consume(room);
            return Ok(LineEnd::TooLong);
        }
        line.extend_from_slice(&available[..take]);
        input.consume(take);
        if complete {
            return Ok(LineEnd::Complete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8]) -> Vec<Frame> {
        let mut reader = FrameReader::new(input);
        let mut frames = Vec::new();
        while let Some(frame) = reader.next_frame().expect("a slice never fails to read") {
            frames.push(frame);
        }
        frames
    }

    fn framed(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    fn body(text: &str) -> Frame {
        Frame::Body(text.as_bytes().to_vec())
    }

    #[test]
    fn well_formed_frames_are_read_in_order() {
        let input = format!("{}Content-Type: application/vscode-jsonrpc\r\n{}", framed("{}"), framed("[1]"));
        assert_eq!(frames(input.as_bytes()), [body("{}"), body("[1]")]);
        // Bare newlines, any case, spaces around the value.
        assert_eq!(frames(b"content-length:  2 \n\n{}"), [body("{}")]);
    }

    #[test]
    fn a_huge_length_is_refused_without_allocating_and_the_next_frame_is_found() {
        for huge in ["1000000000000", "3000000000", "99999999999999999999999999"] {
            let input = format!("Content-Length: {huge}\r\n\r\n{{\"a\":1}}{}", framed("{}"));
            let read = frames(input.as_bytes());
            assert!(matches!(read[0], Frame::Refused(Refusal::TooLarge(_))), "{read:?}");
            assert_eq!(read[1..], [body("{}")]);
        }
        let just_over = format!("Content-Length: {}\r\n\r\n", MAX_CONTENT_LENGTH + 1);
        assert_eq!(frames(just_over.as_bytes()), [Frame::Refused(Refusal::TooLarge(Some(33_554_433)))]);
    }

    #[test]
    fn bad_header_blocks_are_refused_and_skipped() {
        let cases: [(&str, Refusal); 5] = [
            ("Content-Length 5\r\n\r\n{abc}", Refusal::NoContentLength),
            ("\r\n", Refusal::NoContentLength),
            ("Content-Length: -5\r\n\r\n", Refusal::BadContentLength("-5".into())),
            ("Content-Length: 0x10\r\n\r\n", Refusal::BadContentLength("0x10".into())),
            ("Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", Refusal::ConflictingLengths),
        ];
        for (bad, refusal) in cases {
            let input = format!("{bad}{}", framed("{\"ok\":1}"));
            assert_eq!(frames(input.as_bytes()), [Frame::Refused(refusal), body("{\"ok\":1}")], "{bad:?}");
        }
    }

    #[test]
    fn long_lines_and_long_blocks_are_refused() {
        let long_line = format!("X-Junk: {}\r\n", "a".repeat(MAX_HEADER_LINE));
        let input = format!("{long_line}{}", framed("{}"));
        assert_eq!(frames(input.as_bytes()), [Frame::Refused(Refusal::LineTooLong), body("{}")]);
        let many = "X: y\r\n".repeat(MAX_HEADER_LINES);
        let input = format!("{many}{}", framed("{}"));
        assert_eq!(frames(input.as_bytes()), [Frame::Refused(Refusal::TooManyLines), body("{}")]);
    }

    #[test]
    fn the_end_of_the_stream_ends_the_frames_anywhere() {
        assert_eq!(frames(b""), []);
        assert_eq!(frames(b"Content-Len"), []);
        assert_eq!(frames(b"Content-Length: 10\r\n\r\n{\"a\""), []);
        assert_eq!(
            frames(b"Content-Length: 1000000000000\r\n\r\n{}"),
            [Frame::Refused(Refusal::TooLarge(Some(1_000_000_000_000)))]
        );
    }

    #[test]
    fn junk_glued_to_a_header_costs_only_the_junk() {
        let input = format!("junk{}", framed("{}"));
        assert_eq!(frames(input.as_bytes()), [Frame::Refused(Refusal::NoContentLength), body("{}")]);
        let input = format!("x: y\r\n{{}}{}{}", framed("[1]"), framed("[2]"));
        assert_eq!(frames(input.as_bytes()), [Frame::Refused(Refusal::NoContentLength), body("[1]"), body("[2]")]);
    }

    #[test]
    fn an_empty_body_is_a_frame() {
        assert_eq!(frames(b"Content-Length: 0\r\n\r\n"), [body("")]);
    }
}
