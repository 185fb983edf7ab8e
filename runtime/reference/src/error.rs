//! Why an evaluation failed, and where in the source.

use amp_grammar::Span;
use std::fmt;

/// An evaluation error: what went wrong ([`ErrorKind`]) at which source span (the
/// expression, statement or entry point being evaluated when it failed).
#[derive(Clone, Debug, PartialEq)]
pub struct RefError {
    pub span: Span,
    pub kind: ErrorKind,
}

impl RefError {
    pub fn new(span: Span, kind: ErrorKind) -> RefError {
        RefError { span, kind }
    }
}

/// What went wrong. Instance data is untrusted, so most of these are about data that does
/// not fit the program (an index out of range, a tensor of the wrong shape).
#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    /// `xs[i]`, `v[i]` or `experts[i]` with `i` outside `0..len`.
    IndexOutOfRange { index: i64, len: usize },
    /// An `Embedding` looked up a row it does not have.
    EmbeddingOutOfRange { index: i64, count: usize },
    /// `cross_entropy(logits, label)` with `label` outside `0..classes`.
    LabelOutOfRange { label: i64, classes: usize },
    /// `scatter_sum(values, index, n)` with a destination outside `0..n`.
    ScatterIndexOutOfRange { index: i64, n: i64 },
    /// A `while` loop ran more iterations than the evaluator allows (it probably never ends).
    LoopLimit { limit: u64 },
    /// Calls nested deeper than the evaluator allows (a very deep tree, or runaway recursion).
    RecursionLimit { limit: usize },
    /// Evaluation nested so deeply (recursion inside large expressions) that it would
    /// overflow the evaluator's stack of `bytes`.
    StackLimit { bytes: usize },
    /// A value or sequence larger than the evaluator allows.
    TooLarge { what: &'static str, count: u128, limit: u128 },
    /// Integer `/` or `%` by zero.
    DivisionByZero,
    /// Integer arithmetic that overflows `i64`.
    Overflow,
    /// `mean` of an empty sequence or tensor.
    EmptyMean,
    /// Tensors whose shapes do not fit an operation.
    Shape { op: &'static str, detail: String },
    /// A value of the wrong kind where the program expected another (possible only with
    /// ill-typed data or a program that has errors).
    Type { expected: &'static str, found: &'static str },
    /// Sequences whose lengths must agree and do not.
    LengthMismatch { what: &'static str, left: usize, right: usize },
    /// Instance data that does not fit the entry point's input type; `path` names the
    /// field (`x.tree.Node.left.Leaf.word`).
    BadInput { path: String, problem: String },
    /// The parameter set does not belong to this model.
    ParamMismatch { detail: String },
    /// The program cannot be evaluated here: it has errors the checker reported (an
    /// expression of unknown type, a dimension without a value) or no such entry point.
    Unevaluable { what: String },
    /// A bug in the evaluator (it panicked); reported instead of unwinding into the caller.
    Internal { detail: String },
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::IndexOutOfRange { index, len } => {
                write!(f, "index {index} is out of range for a length of {len}")
            }
            ErrorKind::EmbeddingOutOfRange { index, count } => {
                write!(f, "embedding index {index} is out of range: the table has {count} rows")
            }
            ErrorKind::LabelOutOfRange { label, classes } => {
                write!(f, "label {label} is out of range for {classes} classes")
            }
            ErrorKind::ScatterIndexOutOfRange { index, n } => {
                write!(f, "`scatter_sum` destination {index} is out of range 0..{n}")
            }
            ErrorKind::LoopLimit { limit } => {
                write!(f, "`while` loop did not finish within {limit} iterations")
            }
            ErrorKind::RecursionLimit { limit } => write!(f, "calls nested deeper than {limit} levels"),
            ErrorKind::StackLimit { bytes } => {
                write!(f, "evaluation nested too deeply for the evaluator's stack of {} MiB", bytes >> 20)
            }
            ErrorKind::TooLarge { what, count, limit } => {
                write!(f, "{what} of {count} elements exceeds the evaluator's limit of {limit}")
            }
            ErrorKind::DivisionByZero => f.write_str("integer division by zero"),
            ErrorKind::Overflow => f.write_str("integer overflow"),
            ErrorKind::EmptyMean => f.write_str("`mean` of nothing (an empty sequence or tensor)"),
            ErrorKind::Shape { op, detail } => write!(f, "`{op}`: {detail}"),
            ErrorKind::Type { expected, found } => write!(f, "expected {expected}, found {found}"),
            ErrorKind::LengthMismatch { what, left, right } => {
                write!(f, "{what}: lengths {left} and {right} differ")
            }
            ErrorKind::BadInput { path, problem } => write!(f, "bad input data at `{path}`: {problem}"),
            ErrorKind::ParamMismatch { detail } => write!(f, "parameters do not fit the model: {detail}"),
            ErrorKind::Unevaluable { what } => write!(f, "cannot evaluate {what}"),
            ErrorKind::Internal { detail } => write!(f, "internal error in the reference evaluator: {detail}"),
        }
    }
}

impl fmt::Display for RefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at bytes {}..{})", self.kind, self.span.start, self.span.end)
    }
}

impl std::error::Error for RefError {}
