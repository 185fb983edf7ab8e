//! The canonical description of a fused kernel: what the JIT compiles, what the interpreter
//! runs, and the key of the kernel cache.
//!
//! A [`KernelSpec`] is a straight-line program over *values*: first the kernel's inputs,
//! then one value per op, each op reading earlier values only (so the program is in
//! topological order by construction and cannot hold a cycle). Every value is either a
//! **vector** (`n` f32s per row) or a **scalar** (one f32 per row, broadcast over the row's
//! `n` elements by the ops that read it). A kernel call processes `rows` rows at once:
//! one message is one row; several pending messages batched together are several rows.
//!
//! Only elementwise ops exist here ([`Elementwise`]): a row-wise function (`softmax`) cannot
//! be built into an [`Elementwise`] through its constructors, and [`KernelSpec::new`]
//! refuses one written by hand, so a spec is always something the backends can compile.

/// An op of a kernel: a function of the IR's vocabulary that maps elements on their own
/// (`amp_ir::vocab`: its name, arity and whether a saving forward keeps its values).
pub use amp_ir::Elementwise;
use std::fmt::{self, Write as _};

/// Largest `n` (elements per row of a vector value) a spec may have. Far above any real
/// tensor; it keeps `n * 4` bytes and the codegen's constants comfortably inside `i64`.
pub const MAX_ROW_ELEMENTS: usize = 1 << 40;

/// Largest number of values (inputs plus ops) in one spec. A bigger group is refused and
/// runs op by op: it bounds compile time on a hostile graph.
pub const MAX_VALUES: usize = 4096;

/// How many f32s a value has per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Width {
    /// `n` elements per row.
    Vector,
    /// One element per row, broadcast over the row by the vector ops that read it.
    Scalar,
}

/// A value of a spec: inputs are `0..inputs`, op `i` is `inputs + i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// One op of a spec and the values it reads (as many as its arity).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpecOp {
    pub op: Elementwise,
    pub args: Vec<ValueId>,
}

/// Why a spec is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    RowTooLong {
        n: u64,
    },
    TooManyValues {
        count: usize,
    },
    NoOps,
    /// Op `op` is a unary function that is not elementwise (`softmax`).
    NotElementwise {
        op: usize,
    },
    /// Op `op` has `found` arguments where its arity is `expected`.
    Arity {
        op: usize,
        expected: usize,
        found: usize,
    },
    /// Op `op` reads a value that is not defined before it.
    ForwardReference {
        op: usize,
        arg: ValueId,
    },
    /// An output is not an op's value (inputs pass through no kernel), or is out of range.
    BadOutput {
        value: ValueId,
    },
    DuplicateOutput {
        value: ValueId,
    },
    /// [`SpecBuilder::input`] was called after an op had been added.
    InputAfterOp,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::RowTooLong { n } => write!(f, "{n} elements per row is more than {MAX_ROW_ELEMENTS}"),
            SpecError::TooManyValues { count } => write!(f, "{count} values is more than {MAX_VALUES}"),
            SpecError::NoOps => f.write_str("a kernel needs at least one op"),
            SpecError::NotElementwise { op } => write!(f, "op {op} is not an elementwise function"),
            SpecError::Arity { op, expected, found } => {
                write!(f, "op {op} takes {expected} argument(s) but has {found}")
            }
            SpecError::ForwardReference { op, arg } => write!(f, "op {op} reads {arg}, which is not defined before it"),
            SpecError::BadOutput { value } => write!(f, "output {value} is not the value of an op"),
            SpecError::DuplicateOutput { value } => write!(f, "output {value} is listed twice"),
            SpecError::InputAfterOp => f.write_str("inputs must be added before the first op"),
        }
    }
}

impl std::error::Error for SpecError {}

/// A validated kernel description. Equal specs compile to the same code: this is the key
/// of the [`crate::KernelCache`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelSpec {
    n: usize,
    inputs: Vec<Width>,
    ops: Vec<SpecOp>,
    outputs: Vec<ValueId>,
    /// The width of every value (derived; stored so the backends need not recompute it).
    widths: Vec<Width>,
}

impl KernelSpec {
    /// Checks and builds a spec: `n` elements per row of vector values, the widths of the
    /// inputs, the ops in order (each reading earlier values only), and the outputs (op
    /// values, each at most once). An op's value is a vector when any argument is.
    pub fn new(n: u64, inputs: Vec<Width>, ops: Vec<SpecOp>, outputs: Vec<ValueId>) -> Result<KernelSpec, SpecError> {
        let n = usize::try_from(n).ok().filter(|&n| n <= MAX_ROW_ELEMENTS).ok_or(SpecError::RowTooLong { n })?;
        let count = inputs.len() + ops.len();
        if count > MAX_VALUES {
            return Err(SpecError::TooManyValues { count });
        }
        if ops.is_empty() {
            return Err(SpecError::NoOps);
        }
        let mut widths = inputs.clone();
        for (i, op) in ops.iter().enumerate() {
            if let Elementwise::Unary(f) = op.op {
                if !f.is_elementwise() {
                    return Err(SpecError::NotElementwise { op: i });
                }
            }
            if op.args.len() != op.op.arity() {
                return Err(SpecError::Arity { op: i, expected: op.op.arity(), found: op.args.len() });
            }
            let defined = inputs.len() + i;
            let mut width = Width::Scalar;
            for &arg in &op.args {
                if arg.index() >= defined {
                    return Err(SpecError::ForwardReference { op: i, arg });
                }
                if widths[arg.index()] == Width::Vector {
                    width = Width::Vector;
                }
            }
            widths.push(width);
        }
        let mut seen = vec![false; count];
        for &value in &outputs {
            if value.index() < inputs.len() || value.index() >= count {
                return Err(SpecError::BadOutput { value });
            }
            if std::mem::replace(&mut seen[value.index()], true) {
                return Err(SpecError::DuplicateOutput { value });
            }
        }
        Ok(KernelSpec { n, inputs, ops, outputs, widths })
    }

    /// Elements per row of a vector value.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The widths of the kernel's inputs, in port order.
    pub fn inputs(&self) -> &[Width] {
        &self.inputs
    }

    pub fn ops(&self) -> &[SpecOp] {
        &self.ops
    }

    /// The values the kernel writes, in output port order.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// The width of any value.
    pub fn width(&self, value: ValueId) -> Width {
        self.widths[value.index()]
    }

    /// The value that op `i` defines.
    pub fn op_value(&self, i: usize) -> ValueId {
        ValueId((self.inputs.len() + i) as u32)
    }

    pub fn value_count(&self) -> usize {
        self.widths.len()
    }

    /// The widths of the output ports.
    pub fn output_widths(&self) -> impl Iterator<Item = Width> + '_ {
        self.outputs.iter().map(|&v| self.width(v))
    }

    /// The values a saving forward keeps for the backward (see
    /// [`crate::Kernel::run_forward_saving`]): the vector values of the transcendental
    /// functions (`sigmoid`, `tanh`, `exp`, `log`: `amp_ir::vocab::UnarySpec::transcendental`),
    /// in op order. They are most of a kernel's arithmetic (a polynomial and a division
    /// each), which a backward would otherwise compute again.
    pub fn saved(&self) -> Vec<ValueId> {
        (0..self.ops.len())
            .filter(|&i| self.ops[i].op.transcendental() && self.width(self.op_value(i)) == Width::Vector)
            .map(|i| self.op_value(i))
            .collect()
    }

    /// f32s a buffer of this width holds for `rows` rows, or `None` on overflow.
    pub fn buffer_len(&self, width: Width, rows: usize) -> Option<usize> {
        match width {
            Width::Vector => rows.checked_mul(self.n),
            Width::Scalar => Some(rows),
        }
    }

    /// The spec in one line, e.g. `n=150 in(v, v, s) v3=sigmoid(v0) v4=mul(v3, v2) out(v4)`:
    /// the canonical text of the cache key, printed in `--emit clif` comments.
    pub fn describe(&self) -> String {
        let mut text = format!("n={} in(", self.n);
        for (i, w) in self.inputs.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(text, "{sep}{}", if *w == Width::Vector { "v" } else { "s" });
        }
        text.push(')');
        for (i, op) in self.ops.iter().enumerate() {
            let args: Vec<String> = op.args.iter().map(ValueId::to_string).collect();
            let _ = write!(text, " {}={}({})", self.op_value(i), op.op, args.join(", "));
        }
        let outs: Vec<String> = self.outputs.iter().map(ValueId::to_string).collect();
        let _ = write!(text, " out({})", outs.join(", "));
        text
    }
}

/// Builds a [`KernelSpec`] op by op; checks everything in [`SpecBuilder::finish`].
#[derive(Clone, Debug, Default)]
pub struct SpecBuilder {
    n: u64,
    inputs: Vec<Width>,
    ops: Vec<SpecOp>,
    outputs: Vec<ValueId>,
    input_after_op: bool,
}

impl SpecBuilder {
    /// A spec whose vector values have `n` elements per row.
    pub fn new(n: u64) -> SpecBuilder {
        SpecBuilder { n, ..SpecBuilder::default() }
    }

    /// Adds an input. Inputs must all be added before the first op.
    pub fn input(&mut self, width: Width) -> ValueId {
        self.input_after_op |= !self.ops.is_empty();
        self.inputs.push(width);
        ValueId((self.inputs.len() - 1) as u32)
    }

    pub fn op(&mut self, op: Elementwise, args: &[ValueId]) -> ValueId {
        self.ops.push(SpecOp { op, args: args.to_vec() });
        ValueId((self.inputs.len() + self.ops.len() - 1) as u32)
    }

    pub fn output(&mut self, value: ValueId) {
        self.outputs.push(value);
    }

    pub fn finish(self) -> Result<KernelSpec, SpecError> {
        if self.input_after_op {
            return Err(SpecError::InputAfterOp);
        }
        KernelSpec::new(self.n, self.inputs, self.ops, self.outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amp_ir::{BinaryFn, UnaryFn};

    fn one_op(op: Elementwise, args: usize) -> Result<KernelSpec, SpecError> {
        let ops = vec![SpecOp { op, args: (0..args as u32).map(ValueId).collect() }];
        KernelSpec::new(4, vec![Width::Vector; args], ops, vec![ValueId(args as u32)])
    }

    /// The backends have no code for a row-wise function: a spec naming one is refused
    /// here, whatever built it.
    #[test]
    fn row_wise_functions_are_refused() {
        for f in [UnaryFn::Softmax, UnaryFn::LogSoftmax] {
            assert_eq!(one_op(Elementwise::Unary(f), 1), Err(SpecError::NotElementwise { op: 0 }));
        }
        for op in Elementwise::all() {
            assert!(one_op(op, op.arity()).is_ok(), "{op}");
        }
        assert_eq!(
            one_op(Elementwise::Binary(BinaryFn::Add), 1),
            Err(SpecError::Arity { op: 0, expected: 2, found: 1 })
        );
    }

    #[test]
    fn a_saving_forward_keeps_the_transcendental_vector_values() {
        let mut b = SpecBuilder::new(8);
        let (x, s) = (b.input(Width::Vector), b.input(Width::Scalar));
        let t = b.op(Elementwise::Unary(UnaryFn::Tanh), &[x]);
        let r = b.op(Elementwise::Unary(UnaryFn::Relu), &[t]);
        let e = b.op(Elementwise::Unary(UnaryFn::Exp), &[s]);
        let m = b.op(Elementwise::Binary(BinaryFn::Mul), &[r, e]);
        b.output(m);
        let spec = b.finish().expect("valid spec");
        // `exp` of a scalar is not kept: only vector values are worth keeping.
        assert_eq!(spec.saved(), vec![t]);
    }
}
