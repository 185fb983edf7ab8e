//! What can go wrong reading, writing or restoring parameters.

use std::fmt;
use std::path::PathBuf;

/// An error of this crate. Every malformed checkpoint file ends here, never in a panic.
#[derive(Debug)]
pub enum ParamsError {
    /// Reading, writing, syncing or renaming a file failed.
    Io { path: PathBuf, action: &'static str, source: std::io::Error },
    /// The bytes are not a well-formed safetensors file (bad header, offsets, sizes).
    Format { message: String },
    /// The file is well formed but its tensors do not match the model's parameters.
    Mismatch(Mismatch),
    /// The optimizer state in a checkpoint is inconsistent (missing buffers, wrong
    /// lengths, bad step counts) or belongs to another kind of optimizer.
    OptimizerState { message: String },
    /// A metadata key uses the reserved `amp.` namespace or `format`.
    ReservedMetadata { key: String },
    /// A file cannot be written there: the target exists and is not a regular file, or
    /// its directory is missing.
    Target { path: PathBuf, problem: String },
    /// Parameters hold a NaN or an infinity: `count` values of tensor `name`, the first at
    /// flat index `index`.
    NonFinite { name: String, index: usize, value: f32, count: usize },
    /// The error happened in this file.
    InFile { path: PathBuf, source: Box<ParamsError> },
}

/// Every way the tensors of a file differ from the expected parameters, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mismatch {
    /// Parameters the model has and the file lacks.
    pub missing: Vec<String>,
    /// Tensors in the file that the model does not have.
    pub unexpected: Vec<String>,
    pub misshaped: Vec<ShapeMismatch>,
    /// Tensors with another dtype than F32, with the dtype found.
    pub wrong_dtype: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeMismatch {
    pub name: String,
    pub expected: Vec<usize>,
    pub found: Vec<usize>,
}

impl Mismatch {
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.misshaped.is_empty()
            && self.wrong_dtype.is_empty()
    }
}

impl ParamsError {
    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> ParamsError {
        ParamsError::InFile { path: path.into(), source: Box::new(self) }
    }

    /// The error without the file it happened in.
    pub fn root(&self) -> &ParamsError {
        match self {
            ParamsError::InFile { source, .. } => source.root(),
            other => other,
        }
    }
}

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamsError::Io { path, action, source } => write!(f, "cannot {action} `{}`: {source}", path.display()),
            ParamsError::Format { message } => write!(f, "not a valid safetensors file: {message}"),
            ParamsError::Mismatch(m) => write!(f, "{m}"),
            ParamsError::OptimizerState { message } => write!(f, "bad optimizer state: {message}"),
            ParamsError::ReservedMetadata { key } => {
                write!(f, "metadata key `{key}` is reserved (`format` and keys starting with `amp.`)")
            }
            ParamsError::Target { path, problem } => write!(f, "cannot write `{}`: {problem}", path.display()),
            ParamsError::NonFinite { name, index, value, count } => {
                write!(f, "tensor `{name}` holds {value} at index {index}")?;
                if *count > 1 {
                    write!(f, " ({count} non-finite values in all)")?;
                }
                Ok(())
            }
            ParamsError::InFile { path, source } => write!(f, "`{}`: {source}", path.display()),
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing tensors: {}", self.missing.join(", ")));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected tensors: {}", self.unexpected.join(", ")));
        }
        for s in &self.misshaped {
            parts.push(format!("tensor `{}` has shape {:?}, expected {:?}", s.name, s.found, s.expected));
        }
        for (name, dtype) in &self.wrong_dtype {
            parts.push(format!("tensor `{name}` has dtype {dtype}, expected F32"));
        }
        if parts.is_empty() {
            parts.push("no difference".to_string());
        }
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for ParamsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ParamsError::Io { source, .. } => Some(source),
            ParamsError::InFile { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}
