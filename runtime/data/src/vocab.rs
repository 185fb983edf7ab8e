//! A vocabulary: words to embedding indices, with `<unk>` at index 0 for every word it does
//! not know. Built from training data (by frequency or first appearance, cut to a maximum
//! size or a minimum count) or read from a text file with one word per line.

use crate::lines::{Line, Lines};
use crate::DataError;
use std::collections::HashMap;
use std::path::Path;

/// The word every unknown word maps to, always at index 0.
pub const UNK: &str = "<unk>";

/// Words and their indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocab {
    words: Vec<String>,
    index: HashMap<String, u32>,
}

/// The order of the words after `<unk>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VocabOrder {
    /// Most frequent first; ties in order of first appearance.
    #[default]
    Frequency,
    /// In order of first appearance.
    FirstAppearance,
}

/// How to build a vocabulary from data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VocabOptions {
    /// At most this many words, `<unk>` included (a model's `vocab` hyperparameter).
    pub max_size: Option<usize>,
    /// Only words seen at least this often.
    pub min_count: usize,
    /// The order of the words after `<unk>`.
    pub order: VocabOrder,
}

impl Default for VocabOptions {
    fn default() -> VocabOptions {
        VocabOptions { max_size: None, min_count: 1, order: VocabOrder::Frequency }
    }
}

impl Vocab {
    /// The vocabulary of the given word occurrences (`<unk>` itself is not counted).
    pub fn from_words<'a>(words: impl IntoIterator<Item = &'a str>, options: &VocabOptions) -> Vocab {
        let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
        for word in words {
            let next = counts.len();
            counts.entry(word).or_insert((0, next)).0 += 1;
        }
        counts.remove(UNK);
        let mut ranked: Vec<(&str, usize, usize)> = counts
            .into_iter()
            .filter(|(_, (count, _))| *count >= options.min_count)
            .map(|(word, (count, first))| (word, count, first))
            .collect();
        match options.order {
            VocabOrder::Frequency => ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2))),
            VocabOrder::FirstAppearance => ranked.sort_by_key(|w| w.2),
        }
        let keep = options.max_size.map_or(usize::MAX, |m| m.saturating_sub(1));
        let mut words = vec![UNK.to_string()];
        words.extend(ranked.into_iter().take(keep).map(|(w, _, _)| w.to_string()));
        Vocab::from_list(words)
    }

    fn from_list(words: Vec<String>) -> Vocab {
        let index = words.iter().enumerate().map(|(i, w)| (w.clone(), i as u32)).collect();
        Vocab { words, index }
    }

    /// Reads a vocabulary file: one word per line, `<unk>` on the first.
    pub fn parse(text: &[u8], file: &str) -> Result<Vocab, DataError> {
        Vocab::read(Lines::of_bytes(text), file)
    }

    /// [`Vocab::parse`] on lines read as they are taken.
    fn read(lines: impl Iterator<Item = Line>, file: &str) -> Result<Vocab, DataError> {
        let mut words = Vec::new();
        let mut seen = HashMap::new();
        for (number, line) in lines {
            let at = |e: DataError| e.at_line(number).in_file(file);
            let word = line.map_err(at)?;
            let word = word.as_str();
            if number == 1 && word != UNK {
                return Err(at(DataError::invalid(format!("the first word must be `{UNK}`"))));
            }
            if word.is_empty() || word.trim_matches(|c: char| c.is_ascii_whitespace()) != word {
                return Err(at(DataError::invalid("a word must be non-empty, without leading or trailing spaces")));
            }
            if let Some(first) = seen.insert(word.to_string(), number) {
                return Err(at(DataError::invalid(format!("`{word}` is also on line {first}"))));
            }
            words.push(word.to_string());
        }
        if words.is_empty() {
            return Err(DataError::invalid(format!("empty vocabulary (the first word must be `{UNK}`)")).in_file(file));
        }
        Ok(Vocab::from_list(words))
    }

    /// Reads a vocabulary file.
    pub fn load(path: &Path) -> Result<Vocab, DataError> {
        Vocab::read(crate::lines::open(path)?, &path.display().to_string())
    }

    /// The file form: one word per line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for word in &self.words {
            out.push_str(word);
            out.push('\n');
        }
        out
    }

    /// Writes the file form.
    pub fn save(&self, path: &Path) -> Result<(), DataError> {
        std::fs::write(path, self.to_text()).map_err(|e| DataError::io(&path.display().to_string(), &e))
    }

    /// The number of words, `<unk>` included (what the model's embedding needs).
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Never true: `<unk>` is always there.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The index of `word`, 0 (`<unk>`) when it is not in the vocabulary.
    pub fn index(&self, word: &str) -> i64 {
        self.get(word).unwrap_or(0)
    }

    /// The index of `word` if it is in the vocabulary.
    pub fn get(&self, word: &str) -> Option<i64> {
        self.index.get(word).map(|&i| i64::from(i))
    }

    /// The word at `index`.
    pub fn word(&self, index: usize) -> Option<&str> {
        self.words.get(index).map(String::as_str)
    }

    /// All words, in index order.
    pub fn words(&self) -> &[String] {
        &self.words
    }
}
