//! The error every loader and [`crate::Instance::new`] report: what went wrong, and where
//! (file, line, and the field inside the instance), so a bad data line can be found and
//! fixed, or skipped and counted (`skip_bad`).

use std::fmt;

/// A problem with data, located as precisely as the format allows.
///
/// Displayed as
/// ```text
/// data/train.jsonl:17: field `tokens[3]`: expected an int, found "x"
/// ```
/// Boxed, so that results carrying it stay small.
#[derive(Clone, Debug, PartialEq)]
pub struct DataError(Box<Located>);

#[derive(Clone, Debug, PartialEq)]
struct Located {
    file: Option<String>,
    line: Option<usize>,
    field: Option<String>,
    kind: DataErrorKind,
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum DataErrorKind {
    /// The file could not be read or written.
    Io(String),
    /// The text is not in the format (bad JSON, unbalanced brackets, a short SDF block).
    Syntax(String),
    /// A value of the wrong kind: `expected an int, found "x"`.
    Mismatch { expected: String, found: String },
    /// A field the schema requires is absent.
    MissingField,
    /// A field the record or variant does not have; `known` lists the ones it has.
    UnknownField { owner: String, known: Vec<String> },
    /// An enum value names a variant its enum does not have.
    UnknownVariant { enumeration: String, name: String, known: Vec<String> },
    /// The schema does not fit the format (e.g. a PTB loader for a record without a tree).
    Schema(String),
    /// A value nested deeper than the loaders allow (their walks must fit in a stack).
    TooDeep { limit: usize },
    /// Anything else wrong with a value (a non-binary tree, a bond to a missing atom).
    Invalid(String),
    /// A loader option out of range (e.g. zero node kinds).
    Options(String),
    /// The input is past a limit that bounds what reading it holds (a line longer than
    /// [`crate::lines::MAX_LINE_BYTES`]): the load ends there, whatever `skip_bad`.
    TooLarge(String),
}

impl DataError {
    /// An error of `kind`, not yet located.
    pub fn new(kind: DataErrorKind) -> DataError {
        DataError(Box::new(Located { file: None, line: None, field: None, kind }))
    }

    /// The file the data came from, as the caller named it.
    pub fn file(&self) -> Option<&str> {
        self.0.file.as_deref()
    }

    /// The 1-based line the bad instance starts on (or the bad line itself).
    pub fn line(&self) -> Option<usize> {
        self.0.line
    }

    /// The path of the bad field from the instance record: `tokens[3]`, `tree.left.word`.
    pub fn field(&self) -> Option<&str> {
        self.0.field.as_deref()
    }

    /// What is wrong.
    pub fn kind(&self) -> &DataErrorKind {
        &self.0.kind
    }

    /// Replaces the field path with `f(old path)` (used to prefix a path found inside).
    pub(crate) fn map_field(mut self, f: impl FnOnce(&str) -> String) -> DataError {
        let old = self.0.field.take().unwrap_or_default();
        self.0.field = Some(f(&old));
        self
    }

    /// The text is not in the format.
    pub fn syntax(message: impl Into<String>) -> DataError {
        DataError::new(DataErrorKind::Syntax(message.into()))
    }

    /// A value that is wrong for another reason.
    pub fn invalid(message: impl Into<String>) -> DataError {
        DataError::new(DataErrorKind::Invalid(message.into()))
    }

    /// The schema does not fit the format.
    pub fn schema(message: impl Into<String>) -> DataError {
        DataError::new(DataErrorKind::Schema(message.into()))
    }

    /// A file that could not be read or written.
    pub fn io(file: &str, error: &std::io::Error) -> DataError {
        DataError::new(DataErrorKind::Io(error.to_string())).in_file(file)
    }

    /// `expected ..., found ...`.
    pub fn mismatch(expected: impl Into<String>, found: impl Into<String>) -> DataError {
        DataError::new(DataErrorKind::Mismatch { expected: expected.into(), found: found.into() })
    }

    /// Sets the file unless one is set already.
    pub fn in_file(mut self, file: &str) -> DataError {
        self.0.file.get_or_insert_with(|| file.to_string());
        self
    }

    /// Sets the line unless one is set already (an inner, more precise line wins).
    pub fn at_line(mut self, line: usize) -> DataError {
        self.0.line.get_or_insert(line);
        self
    }

    /// Sets the field path unless one is set already (an empty path is the instance itself).
    pub fn in_field(mut self, field: impl Into<String>) -> DataError {
        let field = field.into();
        if self.0.field.is_none() && !field.is_empty() {
            self.0.field = Some(field);
        }
        self
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Located { file, line, field, kind } = &*self.0;
        match (file, *line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            (None, Some(line)) => write!(f, "line {line}: ")?,
            (None, None) => {}
        }
        if let Some(field) = field {
            write!(f, "field `{field}`: ")?;
        }
        match kind {
            DataErrorKind::Io(message) => write!(f, "cannot read or write the file: {message}"),
            DataErrorKind::Syntax(message) | DataErrorKind::Invalid(message) => f.write_str(message),
            DataErrorKind::Mismatch { expected, found } => write!(f, "expected {expected}, found {found}"),
            DataErrorKind::MissingField => f.write_str("missing"),
            DataErrorKind::UnknownField { owner, known } => {
                write!(f, "not a field of {owner} (its fields: {})", list(known))
            }
            DataErrorKind::UnknownVariant { enumeration, name, known } => {
                write!(f, "`{name}` is not a variant of {enumeration} (its variants: {})", list(known))
            }
            DataErrorKind::Schema(message) => write!(f, "the input schema does not fit this format: {message}"),
            DataErrorKind::TooDeep { limit } => write!(f, "nested deeper than {limit} levels"),
            DataErrorKind::Options(message) => write!(f, "invalid loader option: {message}"),
            DataErrorKind::TooLarge(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for DataError {}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// What a loader produced: the instances, each checked against the schema, and how many
/// bad ones were skipped (only with `skip_bad`; otherwise the first bad one is an error).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// The good instances, in file order.
    pub instances: Vec<crate::Value>,
    /// The number of bad lines (or SDF blocks) skipped.
    pub skipped: usize,
    /// Why the first skipped one was bad, for the report.
    pub first_skipped: Option<DataError>,
}

impl Loaded {
    /// Whether `limit` instances are kept already: the loaders read no further (a bad
    /// line after them is never seen).
    pub(crate) fn full(&self, limit: Option<usize>) -> bool {
        limit.is_some_and(|n| self.instances.len() >= n)
    }

    /// Takes the outcome of one instance: keeps it, skips it (with `skip_bad`) or fails.
    pub(crate) fn take(&mut self, outcome: Result<crate::Value, DataError>, skip_bad: bool) -> Result<(), DataError> {
        match outcome {
            Ok(value) => self.instances.push(value),
            Err(error) if !error.fails_load(skip_bad) => {
                self.skipped += 1;
                self.first_skipped.get_or_insert(error);
            }
            Err(error) => return Err(error),
        }
        Ok(())
    }
}

impl DataError {
    /// Whether the error is about one instance (so `skip_bad` may skip it) rather than about
    /// the file or the schema as a whole.
    pub fn is_skippable(&self) -> bool {
        !matches!(
            self.0.kind,
            DataErrorKind::Io(_) | DataErrorKind::Schema(_) | DataErrorKind::Options(_) | DataErrorKind::TooLarge(_)
        )
    }

    /// Whether the error ends a load (rather than being skipped with `skip_bad`).
    pub(crate) fn fails_load(&self, skip_bad: bool) -> bool {
        !(skip_bad && self.is_skippable())
    }
}

/// A printable short form of a piece of source text for `found ...`: at most 40 characters.
pub(crate) fn excerpt(text: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = text.chars().take(MAX).collect();
    if text.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}
