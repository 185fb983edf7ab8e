//! PTB bracket trees, one per line, as in the Stanford Sentiment Treebank:
//! `(3 (2 The) (2 Rock))`: a node is `(label subtree subtree)`, a leaf is `(label word)`.
//!
//! The input record must be one field of a recursive enum (the tree) plus at most one int
//! field (it gets the root's label), e.g.
//! `enum Tree { Leaf { word: int, label: int }, Node { left: Tree, right: Tree, label: int } }`
//! and `record Sentence { tree: Tree, label: int }`. The variants are found by structure:
//! the *leaf* variant has no recursive field and int fields `word` (the word's index in
//! the [`Vocab`]) and optionally `label`; the *branch* variant has exactly two recursive
//! fields (left and right, in declaration order) and optionally an int `label`. Other
//! variants may exist; they are not produced. Trees must be binary: a node with one or
//! three subtrees is an error naming its column.

use crate::lines::{Line, Lines};
use crate::vocab::{Vocab, VocabOptions};
use crate::{DataError, DataErrorKind, Loaded, Value};
use amp_ir::{DataTy, Schema};
use std::path::Path;

/// The deepest tree the loader accepts (SST's deepest is 30); bounds every walk of a tree.
pub const MAX_DEPTH: usize = 1000;

/// Options of the PTB loader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtbOptions {
    /// Skip bad lines (and count them) instead of failing on the first one.
    pub skip_bad: bool,
    /// Lowercase words before looking them up (use the same setting to build the vocabulary).
    pub lowercase: bool,
    /// Read only the first this many trees (the rest of the file is not looked at; a
    /// vocabulary is built from those trees only).
    pub limit: Option<usize>,
}

/// Reads the trees in `path`, words indexed by `vocab`, line by line (see [`read`]).
pub fn load(schema: &Schema, path: &Path, vocab: &Vocab, options: &PtbOptions) -> Result<Loaded, DataError> {
    read(schema, crate::lines::open(path)?, &path.display().to_string(), vocab, options)
}

/// Reads the trees in `text`, naming `file` in errors.
pub fn parse(
    schema: &Schema,
    text: &[u8],
    file: &str,
    vocab: &Vocab,
    options: &PtbOptions,
) -> Result<Loaded, DataError> {
    read(schema, Lines::of_bytes(text), file, vocab, options)
}

/// Reads the trees of `lines`, naming `file` in errors; with a limit, no line after the
/// last tree it takes is read.
pub fn read(
    schema: &Schema,
    mut lines: impl Iterator<Item = Line>,
    file: &str,
    vocab: &Vocab,
    options: &PtbOptions,
) -> Result<Loaded, DataError> {
    let layout = TreeLayout::of(schema).map_err(|e| e.in_file(file))?;
    let mut loaded = Loaded::default();
    // The limit is checked before a line is taken: none after the last tree is read.
    while !loaded.full(options.limit) {
        let Some((number, line)) = lines.next() else { break };
        let outcome = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => parse_tree(&line).map(|tree| layout.build(&tree, vocab, options.lowercase)),
            Err(e) => Err(e),
        };
        loaded.take(outcome.map_err(|e| e.at_line(number).in_file(file)), options.skip_bad)?;
    }
    Ok(loaded)
}

/// The number of trees in `text`, every line a labelled bracket tree (a binary tree whose
/// every node has an int label), as the SST files are; blank lines are errors here, since a
/// data set's split is checked line for line. The first line that is not a tree is an
/// error naming `file:line`.
pub fn count_trees(text: &[u8], file: &str) -> Result<usize, DataError> {
    let mut trees = 0;
    for (number, line) in Lines::of_bytes(text) {
        let tree = match line {
            Ok(line) if line.trim().is_empty() => Err(DataError::syntax("a blank line, not a tree".to_string())),
            Ok(line) => parse_tree(&line).map(|_| ()),
            Err(e) => Err(e),
        };
        tree.map_err(|e| e.at_line(number).in_file(file))?;
        trees += 1;
    }
    Ok(trees)
}

/// The vocabulary of the words in the trees of `text` (a training file).
pub fn build_vocab(text: &[u8], file: &str, options: &PtbOptions, vocab: &VocabOptions) -> Result<Vocab, DataError> {
    build_vocab_of(Lines::of_bytes(text), file, options, vocab)
}

/// [`build_vocab`] on a file, read line by line.
pub fn build_vocab_file(path: &Path, options: &PtbOptions, vocab: &VocabOptions) -> Result<Vocab, DataError> {
    build_vocab_of(crate::lines::open(path)?, &path.display().to_string(), options, vocab)
}

fn build_vocab_of(
    mut lines: impl Iterator<Item = Line>,
    file: &str,
    options: &PtbOptions,
    vocab: &VocabOptions,
) -> Result<Vocab, DataError> {
    let mut words: Vec<String> = Vec::new();
    let mut trees = 0;
    while options.limit.is_none_or(|n| trees < n) {
        let Some((number, line)) = lines.next() else { break };
        let line = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => line,
            Err(e) if e.is_skippable() && options.skip_bad => continue,
            Err(e) => return Err(e.at_line(number).in_file(file)),
        };
        match parse_tree(&line) {
            Ok(tree) => {
                trees += 1;
                words.extend(tree.nodes.iter().filter_map(|n| n.word).map(|w| {
                    if options.lowercase {
                        w.to_lowercase()
                    } else {
                        w.to_string()
                    }
                }))
            }
            Err(_) if options.skip_bad => {}
            Err(e) => return Err(e.at_line(number).in_file(file)),
        }
    }
    Ok(Vocab::from_words(words.iter().map(String::as_str), vocab))
}

/// A parsed tree: nodes in pre-order (children after their parent).
struct RawTree<'a> {
    nodes: Vec<RawNode<'a>>,
}

struct RawNode<'a> {
    label: i64,
    word: Option<&'a str>,
    children: Vec<usize>,
}

enum Token<'a> {
    Open,
    Close,
    Atom(&'a str),
}

/// Splits a line into brackets and atoms, with their byte offsets.
fn tokens(line: &str) -> impl Iterator<Item = (usize, Token<'_>)> {
    let mut rest = line.char_indices().peekable();
    std::iter::from_fn(move || {
        while rest.next_if(|(_, c)| c.is_ascii_whitespace()).is_some() {}
        let (start, c) = rest.next()?;
        Some(match c {
            '(' => (start, Token::Open),
            ')' => (start, Token::Close),
            _ => {
                let mut end = start + c.len_utf8();
                while let Some((i, c)) = rest.next_if(|(_, c)| !c.is_ascii_whitespace() && *c != '(' && *c != ')') {
                    end = i + c.len_utf8();
                }
                (start, Token::Atom(&line[start..end]))
            }
        })
    })
}

/// A token's 1-based column on its line, in chars: counted only when an error is
/// written (counting it for every token made a line of n tokens cost n² steps).
#[derive(Clone, Copy)]
struct Column<'l> {
    line: &'l str,
    offset: usize,
}

impl std::fmt::Display for Column<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chars = self.line.get(..self.offset).map_or(self.offset, |s| s.chars().count());
        write!(f, "{}", chars + 1)
    }
}

/// Parses one bracket tree without recursion.
fn parse_tree(line: &str) -> Result<RawTree<'_>, DataError> {
    let mut nodes: Vec<RawNode> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut done = false;
    let mut tokens = tokens(line);
    while let Some((offset, token)) = tokens.next() {
        let at = Column { line, offset };
        if done && !matches!(token, Token::Close) {
            return Err(DataError::syntax(format!("text after the tree at column {at}")));
        }
        match token {
            Token::Open => {
                let label = match tokens.next() {
                    Some((_, Token::Atom(label))) => label.parse::<i64>().map_err(|_| {
                        DataError::mismatch(
                            "a label (an int)",
                            format!("`{}` at column {at}", crate::error::excerpt(label)),
                        )
                    })?,
                    _ => return Err(DataError::syntax(format!("expected a label after `(` at column {at}"))),
                };
                if open.len() >= MAX_DEPTH {
                    return Err(DataError::new(DataErrorKind::TooDeep { limit: MAX_DEPTH }));
                }
                let index = nodes.len();
                if let Some(parent) = open.last().and_then(|&p| nodes.get_mut(p)) {
                    if parent.word.is_some() {
                        return Err(DataError::syntax(format!("a subtree after a word at column {at}")));
                    }
                    parent.children.push(index);
                }
                nodes.push(RawNode { label, word: None, children: Vec::new() });
                open.push(index);
            }
            Token::Atom(word) => {
                let Some(node) = open.last().and_then(|&p| nodes.get_mut(p)) else {
                    return Err(DataError::syntax(format!("a word outside brackets at column {at}")));
                };
                if node.word.is_some() || !node.children.is_empty() {
                    let word = crate::error::excerpt(word);
                    return Err(DataError::syntax(format!(
                        "unexpected word `{word}` at column {at} (a leaf is `(label word)`)"
                    )));
                }
                node.word = Some(word);
            }
            Token::Close => {
                let Some(node) = open.pop().and_then(|p| nodes.get(p)) else {
                    return Err(DataError::syntax(format!("unbalanced `)` at column {at}")));
                };
                match (node.word, node.children.len()) {
                    (Some(_), _) | (None, 2) => {}
                    (None, 0) => return Err(DataError::syntax(format!("a node without word or subtrees ending at column {at}"))),
                    (None, n) => {
                        return Err(DataError::invalid(format!(
                            "the node ending at column {at} has {n} subtree{}: only binary trees fit (a leaf is `(label word)`)",
                            if n == 1 { "" } else { "s" }
                        )))
                    }
                }
                done = open.is_empty();
            }
        }
    }
    if !open.is_empty() {
        return Err(DataError::syntax(format!("unbalanced brackets: {} `(` not closed", open.len())));
    }
    if nodes.is_empty() {
        return Err(DataError::syntax("no tree on the line"));
    }
    Ok(RawTree { nodes })
}

/// Where the parts of a tree go in the schema's record and enum.
#[derive(Debug)]
struct TreeLayout {
    record_fields: usize,
    tree_field: usize,
    root_label: Option<usize>,
    leaf: VariantLayout,
    branch: VariantLayout,
}

/// A variant's tag and field positions: `left`/`right` for a branch, `word` for a leaf.
#[derive(Debug)]
struct VariantLayout {
    tag: u32,
    fields: usize,
    first: usize,
    second: usize,
    label: Option<usize>,
}

impl TreeLayout {
    fn of(schema: &Schema) -> Result<TreeLayout, DataError> {
        schema.check().map_err(DataError::schema)?;
        let record = schema.input_record().ok_or_else(|| DataError::schema("no input record"))?;
        let is_tree = |ty: &DataTy| matches!(ty, DataTy::Enum(e) if schema.is_recursive(*e));
        let trees: Vec<usize> =
            record.fields.iter().enumerate().filter(|(_, f)| is_tree(&f.ty)).map(|(i, _)| i).collect();
        let [tree_field] = trees[..] else {
            return Err(DataError::schema(format!(
                "record {} needs exactly one field of a recursive enum (the tree), it has {}",
                record.name,
                trees.len()
            )));
        };
        let mut root_label = None;
        for (i, field) in record.fields.iter().enumerate().filter(|(i, _)| *i != tree_field) {
            if field.ty != DataTy::Int || root_label.is_some() {
                return Err(DataError::schema(format!(
                    "field `{}` of {}: besides the tree, a PTB record has at most one int field (the root label)",
                    field.name, record.name
                )));
            }
            root_label = Some(i);
        }
        let DataTy::Enum(id) = record.fields[tree_field].ty else { return Err(DataError::schema("no tree field")) };
        let enumeration = schema.enums.get(id as usize).ok_or_else(|| DataError::schema("no tree enum"))?;
        let (mut leaves, mut branches) = (Vec::new(), Vec::new());
        for (tag, variant) in enumeration.variants.iter().enumerate() {
            let position = |name: &str| variant.fields.iter().position(|f| f.name == name && f.ty == DataTy::Int);
            let recursive: Vec<usize> =
                (0..variant.fields.len()).filter(|&i| variant.fields[i].ty == DataTy::Enum(id)).collect();
            let label = position("label");
            let extra = |allowed: usize| variant.fields.len() != allowed + usize::from(label.is_some());
            match (&recursive[..], position("word")) {
                (&[], Some(word)) if !extra(1) => leaves.push(VariantLayout {
                    tag: tag as u32,
                    fields: variant.fields.len(),
                    first: word,
                    second: word,
                    label,
                }),
                (&[left, right], _) if !extra(2) => branches.push(VariantLayout {
                    tag: tag as u32,
                    fields: variant.fields.len(),
                    first: left,
                    second: right,
                    label,
                }),
                _ => {}
            }
        }
        let shape = "a leaf variant (int `word`, optional int `label`, nothing else) and a branch variant \
                     (two fields of the enum, optional int `label`, nothing else)";
        if leaves.len() != 1 || branches.len() != 1 {
            return Err(DataError::schema(format!(
                "enum {} needs exactly one of each of {shape}; it has {} leaf and {} branch variants",
                enumeration.name,
                leaves.len(),
                branches.len()
            )));
        }
        let (leaf, branch) = (leaves.remove(0), branches.remove(0));
        Ok(TreeLayout { record_fields: record.fields.len(), tree_field, root_label, leaf, branch })
    }

    /// The instance of a parsed tree, built bottom-up (children come after parents).
    fn build(&self, tree: &RawTree, vocab: &Vocab, lowercase: bool) -> Value {
        let mut built: Vec<Option<Value>> = Vec::with_capacity(tree.nodes.len());
        built.resize_with(tree.nodes.len(), || None);
        for (i, node) in tree.nodes.iter().enumerate().rev() {
            let (layout, mut fields) = match node.word {
                Some(word) => {
                    let index = if lowercase { vocab.index(&word.to_lowercase()) } else { vocab.index(word) };
                    let mut fields = vec![Value::Int(0); self.leaf.fields];
                    fields[self.leaf.first] = Value::Int(index);
                    (&self.leaf, fields)
                }
                None => {
                    let mut fields = vec![Value::Int(0); self.branch.fields];
                    let mut child =
                        |n: usize| node.children.get(n).and_then(|&c| built.get_mut(c)).and_then(Option::take);
                    fields[self.branch.first] = child(0).unwrap_or(Value::Int(0));
                    fields[self.branch.second] = child(1).unwrap_or(Value::Int(0));
                    (&self.branch, fields)
                }
            };
            if let Some(label) = layout.label {
                fields[label] = Value::Int(node.label);
            }
            built[i] = Some(Value::Variant { tag: layout.tag, fields });
        }
        let mut record = vec![Value::Int(0); self.record_fields];
        record[self.tree_field] = built.first_mut().and_then(Option::take).unwrap_or(Value::Int(0));
        if let (Some(label), Some(root)) = (self.root_label, tree.nodes.first()) {
            record[label] = Value::Int(root.label);
        }
        Value::Record(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A balanced tree of `leaves` leaves on one line, built without recursion.
    fn balanced(leaves: usize) -> String {
        let mut level: Vec<String> = (0..leaves).map(|i| format!("(1 w{})", i % 7)).collect();
        while level.len() > 1 {
            level = level.chunks(2).map(|pair| format!("(2 {})", pair.join(" "))).collect();
        }
        level.pop().unwrap_or_default()
    }

    /// A line of a quarter of a million leaves parses into all its nodes (issue 48,
    /// finding 12: each token's column was counted from the line's start, n² steps for a
    /// line of n tokens, so a line this long did not finish).
    #[test]
    fn a_tree_of_a_quarter_million_leaves_parses() {
        let leaves = 1 << 18;
        let line = balanced(leaves);
        let tree = parse_tree(&line).unwrap();
        assert_eq!(tree.nodes.len(), 2 * leaves - 1);
        assert_eq!(tree.nodes.iter().filter(|n| n.word.is_some()).count(), leaves);
    }

    /// Errors still name the column, counted in chars.
    #[test]
    fn an_error_names_its_column_in_chars() {
        let Err(error) = parse_tree("(2 (1 é) x)") else { panic!("a word outside its leaf is refused") };
        let error = error.to_string();
        assert!(error.contains("column 10"), "{error}");
    }
}
