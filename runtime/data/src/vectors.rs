//! Pretrained word vectors in the GloVe / word2vec text format, aligned with a
//! [`Vocab`]: one word per line followed by its numbers, separated by spaces
//! (`the 0.418 0.24968 -0.41242 ...`), with word2vec's optional first line `COUNT DIM`.
//!
//! The file is untrusted and may be large (GloVe's are gigabytes): it is read line by line,
//! a line longer than [`max_line_bytes`] is an error, and only the vectors of vocabulary
//! words are parsed and kept, so memory is bounded by the vocabulary, never by the file.
//! The dimension is the header's, else the first line's; it must be the one the caller
//! expects. The last `DIM` fields of a line are the vector and what comes before them is the
//! word (GloVe's 840B file has a few words with spaces in them). A word seen twice keeps
//! its first vector; with `lowercase` words are lowercased before the lookup (the
//! vocabulary was built that way), so the first of `The` and `the` gives `the`'s vector.

use crate::error::excerpt;
use crate::{DataError, Vocab};
use std::io::BufRead;
use std::path::Path;

/// How to read a vectors file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorsOptions {
    /// The dimension the vectors must have (the embedding's columns).
    pub dim: usize,
    /// Lowercase the file's words before looking them up.
    pub lowercase: bool,
}

/// The vectors of the vocabulary's words.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Aligned {
    /// `(vocabulary index, vector)`, in file order, one per word found.
    pub rows: Vec<(usize, Vec<f32>)>,
    /// Vector lines in the file (the header and empty lines not counted).
    pub lines: usize,
}

/// The longest line accepted for vectors of `dim` numbers: 64 bytes a number, and 4 KiB
/// for the word.
pub fn max_line_bytes(dim: usize) -> usize {
    dim.saturating_mul(64).saturating_add(4096)
}

/// Reads the vectors file at `path` (see the module documentation).
pub fn load(path: &Path, vocab: &Vocab, options: &VectorsOptions) -> Result<Aligned, DataError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| DataError::io(&name, &e))?;
    read(std::io::BufReader::with_capacity(1 << 16, file), &name, vocab, options)
}

/// Reads vectors from `reader`, naming `file` in errors.
pub fn read(
    mut reader: impl BufRead,
    file: &str,
    vocab: &Vocab,
    options: &VectorsOptions,
) -> Result<Aligned, DataError> {
    let dim = options.dim;
    if dim == 0 {
        return Err(DataError::invalid("vectors of 0 dimensions").in_file(file));
    }
    let limit = max_line_bytes(dim);
    let mut found = vec![false; vocab.len()];
    let mut aligned = Aligned::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        // One byte past the limit tells a line that is too long from one that fits.
        let read = std::io::Read::take(&mut reader, limit as u64 + 1).read_until(b'\n', &mut buf);
        let read = read.map_err(|e| DataError::io(file, &e))?;
        if read == 0 {
            break;
        }
        number += 1;
        let at = |e: DataError| e.at_line(number).in_file(file);
        let ended = buf.last() == Some(&b'\n');
        if !ended && buf.len() > limit {
            return Err(at(DataError::invalid(format!(
                "the line is longer than {limit} bytes (a word and {dim} numbers)"
            ))));
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let fields: Vec<&[u8]> = line.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty()).collect();
        if fields.is_empty() {
            continue;
        }
        if number == 1 && dim != 1 {
            if let [count, declared] = fields[..] {
                if let (Some(_), Some(declared)) = (integer(count), integer(declared)) {
                    if declared != dim as u64 {
                        return Err(at(DataError::invalid(format!(
                            "the header declares vectors of {declared} dimensions, expected {dim}"
                        ))));
                    }
                    continue;
                }
            }
        }
        aligned.lines += 1;
        let numbers = fields.len() - 1;
        if numbers < dim || (aligned.lines == 1 && numbers != dim) {
            let what = if aligned.lines == 1 { "the vectors have" } else { "the line has" };
            return Err(at(DataError::invalid(format!(
                "{what} {numbers} number{} after the word, expected {dim}",
                if numbers == 1 { "" } else { "s" }
            ))));
        }
        let (word, values) = fields.split_at(fields.len() - dim);
        let Some(index) = lookup(vocab, word, options.lowercase) else { continue };
        let Some(seen) = found.get_mut(index) else { continue };
        if *seen {
            continue;
        }
        let mut vector = Vec::with_capacity(dim);
        for (k, field) in values.iter().enumerate() {
            let text = std::str::from_utf8(field).unwrap_or("");
            match text.parse::<f32>() {
                Ok(x) if x.is_finite() => vector.push(x),
                _ => {
                    let shown = excerpt(&String::from_utf8_lossy(field));
                    return Err(at(DataError::invalid(format!(
                        "number {} of `{}`: `{shown}` is not a finite number",
                        k + 1,
                        excerpt(&String::from_utf8_lossy(&word.join(&b' ')))
                    ))));
                }
            }
        }
        *seen = true;
        aligned.rows.push((index, vector));
    }
    Ok(aligned)
}

fn integer(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// The vocabulary index of the word made of `parts` (joined by spaces), if it has one.
fn lookup(vocab: &Vocab, parts: &[&[u8]], lowercase: bool) -> Option<usize> {
    let word = std::str::from_utf8(&parts.join(&b' ')).ok()?.to_string();
    let word = if lowercase { word.to_lowercase() } else { word };
    vocab.get(&word).and_then(|i| usize::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(words: &[&str]) -> Vocab {
        let mut list = vec!["<unk>".to_string()];
        list.extend(words.iter().map(|w| w.to_string()));
        Vocab::parse(list.join("\n").as_bytes(), "v").unwrap()
    }

    fn read_text(text: &str, vocab: &Vocab, dim: usize, lowercase: bool) -> Result<Aligned, DataError> {
        read(text.as_bytes(), "vec.txt", vocab, &VectorsOptions { dim, lowercase })
    }

    #[test]
    fn glove_lines_are_aligned_with_the_vocabulary() {
        let v = vocab(&["the", "cat", "sat"]);
        let text = "the 0.1 0.2 0.3\ndog 1 2 3\ncat -1 -2e-1 3.5\n\nthe 9 9 9\n";
        let aligned = read_text(text, &v, 3, false).unwrap();
        assert_eq!(aligned.lines, 4);
        assert_eq!(aligned.rows, vec![(1, vec![0.1, 0.2, 0.3]), (2, vec![-1.0, -0.2, 3.5])]);
    }

    #[test]
    fn word2vec_headers_and_words_with_spaces_are_read() {
        let v = vocab(&[". . .", "cat"]);
        let aligned = read_text("3 2\nCat 3 4\n. . . 1 2\nx 5 6\n", &v, 2, true).unwrap();
        assert_eq!(aligned.lines, 3);
        assert_eq!(aligned.rows, vec![(2, vec![3.0, 4.0]), (1, vec![1.0, 2.0])]);
    }

    #[test]
    fn mismatched_dimensions_and_bad_numbers_name_file_and_line() {
        let v = vocab(&["a", "b"]);
        let e = read_text("a 1 2 3\n", &v, 2, false).unwrap_err().to_string();
        assert_eq!(e, "vec.txt:1: the vectors have 3 numbers after the word, expected 2");
        let e = read_text("5 3\na 1 2 3\n", &v, 2, false).unwrap_err().to_string();
        assert_eq!(e, "vec.txt:1: the header declares vectors of 3 dimensions, expected 2");
        let e = read_text("a 1 2\nb 1\n", &v, 2, false).unwrap_err().to_string();
        assert_eq!(e, "vec.txt:2: the line has 1 number after the word, expected 2");
        let e = read_text("a 1 2\nb 1 nan\n", &v, 2, false).unwrap_err().to_string();
        assert_eq!(e, "vec.txt:2: number 2 of `b`: `nan` is not a finite number");
        // A word outside the vocabulary is not parsed, only counted.
        assert_eq!(read_text("a 1 2\nzz 1 x\n", &v, 2, false).unwrap().lines, 2);
    }

    #[test]
    fn an_overlong_line_is_an_error_not_an_allocation() {
        let v = vocab(&["a"]);
        let long = format!("a {}\n", "1 ".repeat(max_line_bytes(2)));
        let e = read_text(&long, &v, 2, false).unwrap_err().to_string();
        assert!(e.starts_with("vec.txt:1: the line is longer than"), "{e}");
    }
}
