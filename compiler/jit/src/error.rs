//! Errors of kernel construction and kernel calls.

use crate::spec::SpecError;
use std::fmt;

/// Which buffer list of a call a [`KernelError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferRole {
    /// Forward: the kernel's inputs. Backward: the saved inputs, then the output gradients.
    Inputs,
    /// Forward: the kernel's outputs. Backward: the input gradients.
    Outputs,
    /// The values a saving forward keeps for the backward.
    Saved,
}

impl fmt::Display for BufferRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BufferRole::Inputs => "input",
            BufferRole::Outputs => "output",
            BufferRole::Saved => "saved values",
        })
    }
}

/// Why a kernel could not be built or called. Never a panic: a hostile graph or a wrong
/// call ends here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// A call passed `found` buffers where the kernel has `expected` ports.
    BufferCount { role: BufferRole, expected: usize, found: usize },
    /// Buffer `port` holds `found` f32s where `rows` rows need `expected`.
    BufferLength { role: BufferRole, port: usize, expected: usize, found: usize },
    /// Input buffer `port` is strided by `stride` f32s, less than its rows' `width` (or
    /// a scalar port, which is always packed).
    Stride { port: usize, stride: usize, width: usize },
    /// `rows × n` does not fit in memory.
    RowsOverflow { rows: usize, n: usize },
    /// The spec is malformed.
    Spec(SpecError),
    /// This machine has no Cranelift backend (or its settings were refused).
    Host(String),
    /// Cranelift refused the generated function (a bug in this crate; the group can still
    /// run through the interpreter).
    Codegen(String),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::BufferCount { role, expected, found } => {
                write!(f, "expected {expected} {role} buffer(s), got {found}")
            }
            KernelError::BufferLength { role, port, expected, found } => {
                write!(f, "{role} buffer {port} holds {found} f32s, the kernel needs {expected}")
            }
            KernelError::Stride { port, stride, width } => {
                write!(
                    f,
                    "input buffer {port} has rows {stride} f32s apart, but rows of {width} (a scalar port is packed)"
                )
            }
            KernelError::RowsOverflow { rows, n } => write!(f, "{rows} rows of {n} elements overflow"),
            KernelError::Spec(e) => write!(f, "malformed kernel: {e}"),
            KernelError::Host(e) => write!(f, "no JIT on this machine: {e}"),
            KernelError::Codegen(e) => write!(f, "Cranelift refused a kernel: {e}"),
        }
    }
}

impl std::error::Error for KernelError {}

impl From<SpecError> for KernelError {
    fn from(e: SpecError) -> Self {
        KernelError::Spec(e)
    }
}
