//! The kernel interpreter: plain Rust, op by op over whole buffers, allocating one buffer
//! per op as an op-by-op executor does. It is the differential oracle of the JIT and the
//! `--no-jit` path, and it is generic over the number type ([`Arith`]) so that tests can
//! run it on error-tracking numbers or in f64.
//!
//! It follows the JIT's semantics exactly where they are defined bit for bit (the order of
//! every addition into an adjoint, structural zeros, NaN rules) and differs only where the
//! JIT documents an approximation (`exp`, `log`, `tanh`, `sigmoid`: here through Rust's
//! `f32` functions) and in the order of the sums that reduce a broadcast scalar's gradient.

use crate::error::{BufferRole, KernelError};
use crate::spec::{Elementwise, KernelSpec, Width};
use amp_ir::vocab::{GELU_C, GELU_K};
use amp_ir::{BinaryFn, UnaryFn};

/// Which function of a kernel a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pass {
    /// `inputs` → `outputs`.
    Forward,
    /// `inputs ++ output gradients` → `input gradients` (overwritten, not accumulated).
    /// The forward values are recomputed from the inputs, so the inputs are all a caller
    /// needs to keep for the backward pass.
    Backward,
}

/// The numbers the interpreter computes with: `f32` to execute, other types in tests.
///
/// The NaN rules every implementation follows: `relu(x) = if x < 0 { 0 } else { x }`, so
/// `relu(NaN) = NaN` and `relu(-0.0) = -0.0`; the gradient of `relu` is `if x <= 0 { 0 }
/// else { g }`, so a NaN input passes its gradient through (both as PyTorch does).
pub trait Arith: Copy {
    fn from_f32(x: f32) -> Self;
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn div(self, other: Self) -> Self;
    fn neg(self) -> Self;
    fn relu(self) -> Self;
    /// `g` where `self > 0` or `self` is NaN, else 0.
    fn relu_grad(self, g: Self) -> Self;
    fn exp(self) -> Self;
    fn log(self) -> Self;
    fn tanh(self) -> Self;
    /// `1 / (1 + exp(-x))`.
    fn sigmoid(self) -> Self;
    /// The sum of a row's gradient terms for a broadcast scalar (any order).
    fn sum(terms: &[Self]) -> Self;
}

impl Arith for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
    fn add(self, other: Self) -> Self {
        self + other
    }
    fn sub(self, other: Self) -> Self {
        self - other
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
    fn div(self, other: Self) -> Self {
        self / other
    }
    fn neg(self) -> Self {
        -self
    }
    fn relu(self) -> Self {
        if self < 0.0 {
            0.0
        } else {
            self
        }
    }
    fn relu_grad(self, g: Self) -> Self {
        if self <= 0.0 {
            0.0
        } else {
            g
        }
    }
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn log(self) -> Self {
        f32::ln(self)
    }
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + f32::exp(-self))
    }
    fn sum(terms: &[Self]) -> Self {
        terms.iter().fold(0.0, |acc, &t| acc + t)
    }
}

/// One input-side buffer of a kernel call (the kernel's inputs and, backward, the output
/// gradients): `rows` rows of its port's width, row `r` starting at `values[r·stride]`.
/// Packed rows (the stride is the width, [`Rows::packed`]) are what [`crate::Kernel::run`]
/// takes; a wider stride ([`Rows::strided`]) reads a column block of wider rows in place,
/// the part of an absorbed split, with `values` starting at the block's first column.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a, T = f32> {
    values: &'a [T],
    stride: Option<usize>,
}

impl<'a, T> Rows<'a, T> {
    pub fn packed(values: &'a [T]) -> Self {
        Rows { values, stride: None }
    }

    /// Rows `stride` values apart; only a vector port may be strided.
    pub fn strided(values: &'a [T], stride: usize) -> Self {
        Rows { values, stride: Some(stride) }
    }

    pub(crate) fn values(&self) -> &'a [T] {
        self.values
    }

    /// The distance between rows for a port `width` wide.
    pub(crate) fn stride(&self, width: usize) -> usize {
        self.stride.unwrap_or(width)
    }
}

/// Checks a call's buffers against the spec: the right number of each; each packed buffer
/// exactly the length `rows` rows need (`rows × n` for vector ports, `rows` for scalar
/// ports); each strided one a vector input with a stride of at least `n`, long enough for
/// the last row's `n` values and no longer than `rows` strides. `outputs` is `None` where
/// the call makes its output buffers itself, to size.
pub(crate) fn check_call<T>(
    spec: &KernelSpec,
    pass: Pass,
    rows: usize,
    inputs: &[Rows<'_, T>],
    outputs: Option<&[&mut [T]]>,
) -> Result<(), KernelError> {
    let n = spec.n();
    let vector_len = rows.checked_mul(n).ok_or(KernelError::RowsOverflow { rows, n })?;
    let expect = |role, port, width, found: usize| {
        let expected = if width == Width::Vector { vector_len } else { rows };
        if found == expected {
            Ok(())
        } else {
            Err(KernelError::BufferLength { role, port, expected, found })
        }
    };
    let (input_count, output_count) = match pass {
        Pass::Forward => (spec.inputs().len(), spec.outputs().len()),
        Pass::Backward => (spec.inputs().len() + spec.outputs().len(), spec.inputs().len()),
    };
    if inputs.len() != input_count {
        return Err(KernelError::BufferCount { role: BufferRole::Inputs, expected: input_count, found: inputs.len() });
    }
    let outputs = match outputs {
        Some(outputs) if outputs.len() != output_count => {
            let found = outputs.len();
            return Err(KernelError::BufferCount { role: BufferRole::Outputs, expected: output_count, found });
        }
        Some(outputs) => outputs,
        None => &[],
    };
    let input_widths = spec.inputs().iter().copied().chain(spec.output_widths());
    for (port, (buffer, width)) in inputs.iter().zip(input_widths).enumerate() {
        let found = buffer.values.len();
        match buffer.stride {
            None => expect(BufferRole::Inputs, port, width, found)?,
            Some(stride) if width == Width::Scalar || stride < n => {
                return Err(KernelError::Stride { port, stride, width: if width == Width::Vector { n } else { 1 } })
            }
            Some(stride) => {
                let overflow = KernelError::RowsOverflow { rows, n: stride };
                let longest = rows.checked_mul(stride).ok_or(overflow)?;
                let shortest = if rows == 0 { 0 } else { longest - stride + n };
                if found < shortest || found > longest {
                    return Err(KernelError::BufferLength {
                        role: BufferRole::Inputs,
                        port,
                        expected: shortest,
                        found,
                    });
                }
            }
        }
    }
    let check_outputs = |widths: &mut dyn Iterator<Item = Width>| -> Result<(), KernelError> {
        for (port, (buffer, width)) in outputs.iter().zip(widths).enumerate() {
            expect(BufferRole::Outputs, port, width, buffer.len())?;
        }
        Ok(())
    };
    match pass {
        Pass::Forward => check_outputs(&mut spec.output_widths())?,
        Pass::Backward => check_outputs(&mut spec.inputs().iter().copied())?,
    }
    Ok(())
}

/// Runs a kernel's forward or backward function op by op; same buffers and errors as
/// [`crate::Kernel::run`].
pub fn interpret<T: Arith>(
    spec: &KernelSpec,
    pass: Pass,
    rows: usize,
    inputs: &[&[T]],
    outputs: &mut [&mut [T]],
) -> Result<(), KernelError> {
    let packed: Vec<Rows<T>> = inputs.iter().map(|b| Rows::packed(b)).collect();
    interpret_rows(spec, pass, rows, &packed, outputs)
}

/// [`interpret`] on input-side buffers that may be strided: a strided buffer's rows are
/// first copied into a packed one, so it computes exactly what the packed call computes.
pub fn interpret_rows<T: Arith>(
    spec: &KernelSpec,
    pass: Pass,
    rows: usize,
    inputs: &[Rows<'_, T>],
    outputs: &mut [&mut [T]],
) -> Result<(), KernelError> {
    check_call(spec, pass, rows, inputs, Some(outputs))?;
    let n = spec.n();
    let packed: Vec<std::borrow::Cow<[T]>> = inputs
        .iter()
        .map(|b| match b.stride {
            None => std::borrow::Cow::Borrowed(b.values),
            Some(stride) => {
                let rows = (0..rows).flat_map(|r| &b.values[r * stride..r * stride + n]);
                std::borrow::Cow::Owned(rows.copied().collect())
            }
        })
        .collect();
    let inputs: Vec<&[T]> = packed.iter().map(|b| &**b).collect();
    let values = Evaluator { spec, rows }.forward(&inputs[..spec.inputs().len()]);
    match pass {
        Pass::Forward => {
            for (out, &v) in outputs.iter_mut().zip(spec.outputs()) {
                out.copy_from_slice(values[v.index()].slice());
            }
        }
        Pass::Backward => {
            let grads = &inputs[spec.inputs().len()..];
            Evaluator { spec, rows }.backward(&values, grads, outputs);
        }
    }
    Ok(())
}

struct Evaluator<'s> {
    spec: &'s KernelSpec,
    rows: usize,
}

/// A value's buffer: an input, borrowed, or an op's, owned.
enum Buf<'a, T> {
    Borrowed(&'a [T]),
    Owned(Vec<T>),
}

impl<T> Buf<'_, T> {
    fn slice(&self) -> &[T] {
        match self {
            Buf::Borrowed(b) => b,
            Buf::Owned(v) => v,
        }
    }
}

/// Row `r` of an operand, `count` elements: its own row, or (a scalar read by a vector
/// op) its value broadcast into `scratch`.
fn row<'b, T: Copy>(buf: &'b [T], width: Width, n: usize, r: usize, count: usize, scratch: &'b mut Vec<T>) -> &'b [T] {
    match width {
        Width::Vector => &buf[r * n..(r + 1) * n],
        Width::Scalar if count == 1 => &buf[r..r + 1],
        Width::Scalar => {
            scratch.clear();
            scratch.resize(count, buf[r]);
            scratch
        }
    }
}

impl<'s> Evaluator<'s> {
    fn len(&self, width: Width) -> usize {
        match width {
            Width::Vector => self.rows * self.spec.n(),
            Width::Scalar => self.rows,
        }
    }

    /// Elements per row of a value of this width.
    fn per_row(&self, width: Width) -> usize {
        match width {
            Width::Vector => self.spec.n(),
            Width::Scalar => 1,
        }
    }

    /// Every value, inputs borrowed and one new buffer per op.
    fn forward<'a, T: Arith>(&self, inputs: &[&'a [T]]) -> Vec<Buf<'a, T>> {
        let spec = self.spec;
        let n = spec.n();
        let mut values: Vec<Buf<'a, T>> = inputs.iter().map(|&b| Buf::Borrowed(b)).collect();
        let (mut scratch_a, mut scratch_b) = (Vec::new(), Vec::new());
        for (i, op) in spec.ops().iter().enumerate() {
            let width = spec.width(spec.op_value(i));
            let count = self.per_row(width);
            let mut out = Vec::with_capacity(self.len(width));
            let (a, b) = (op.args[0], op.args.get(1).copied().unwrap_or(op.args[0]));
            for r in 0..self.rows {
                let a = row(values[a.index()].slice(), spec.width(a), n, r, count, &mut scratch_a);
                let b = row(values[b.index()].slice(), spec.width(b), n, r, count, &mut scratch_b);
                forward_row(op.op, a, b, &mut out);
            }
            values.push(Buf::Owned(out));
        }
        values
    }

    /// Reverse mode over the ops, writing the input gradients.
    fn backward<T: Arith>(&self, values: &[Buf<'_, T>], out_grads: &[&[T]], in_grads: &mut [&mut [T]]) {
        let spec = self.spec;
        let n = spec.n();
        // The gradient terms of each value, in the order the JIT adds them: the output
        // gradient first, then the ops that read the value, last op first. Each term has
        // the width of the op that produced it.
        let mut terms: Vec<Vec<(Width, Vec<T>)>> = (0..spec.value_count()).map(|_| Vec::new()).collect();
        let (mut scratch_a, mut scratch_b) = (Vec::new(), Vec::new());
        for (&v, grad) in spec.outputs().iter().zip(out_grads) {
            terms[v.index()].push((spec.width(v), grad.to_vec()));
        }
        for i in (0..spec.ops().len()).rev() {
            let v = spec.op_value(i);
            let Some(g) = self.adjoint(spec.width(v), std::mem::take(&mut terms[v.index()])) else { continue };
            let op = &spec.ops()[i];
            let width = spec.width(v);
            let y = values[v.index()].slice();
            let (a, b) = (op.args[0], op.args.get(1).copied().unwrap_or(op.args[0]));
            let count = self.per_row(width);
            let len = self.len(width);
            let mut ga = Vec::with_capacity(len);
            let mut gb = Vec::with_capacity(if op.op.arity() == 2 { len } else { 0 });
            for r in 0..self.rows {
                let rows = (r * count)..((r + 1) * count);
                let a = row(values[a.index()].slice(), spec.width(a), n, r, count, &mut scratch_a);
                let b = row(values[b.index()].slice(), spec.width(b), n, r, count, &mut scratch_b);
                backward_row(op.op, &g[rows.clone()], a, b, &y[rows], &mut ga, &mut gb);
            }
            terms[op.args[0].index()].push((width, ga));
            if op.op.arity() == 2 {
                terms[op.args[1].index()].push((width, gb));
            }
        }
        for (port, out) in in_grads.iter_mut().enumerate() {
            let width = spec.inputs()[port];
            match self.adjoint(width, std::mem::take(&mut terms[port])) {
                Some(g) => out.copy_from_slice(&g),
                None => out.fill(T::from_f32(0.0)),
            }
        }
    }

    /// Combines a value's gradient terms: a vector value adds them in order; a scalar
    /// value sums, per row, every element of every term (the broadcast's reduction).
    /// `None` when nothing flows into the value (a structural zero: its op is skipped).
    fn adjoint<T: Arith>(&self, width: Width, terms: Vec<(Width, Vec<T>)>) -> Option<Vec<T>> {
        if terms.is_empty() {
            return None;
        }
        match width {
            Width::Vector => {
                let mut terms = terms.into_iter();
                let (_, mut acc) = terms.next()?;
                for (_, term) in terms {
                    for (a, t) in acc.iter_mut().zip(term) {
                        *a = a.add(t);
                    }
                }
                Some(acc)
            }
            Width::Scalar => {
                let n = self.spec.n();
                let mut row_terms = Vec::new();
                let sums = (0..self.rows)
                    .map(|r| {
                        row_terms.clear();
                        for (w, term) in &terms {
                            match w {
                                Width::Vector => row_terms.extend_from_slice(&term[r * n..(r + 1) * n]),
                                Width::Scalar => row_terms.push(term[r]),
                            }
                        }
                        T::sum(&row_terms)
                    })
                    .collect();
                Some(sums)
            }
        }
    }
}

/// `tanh(c·(x + k·x²·x))`, GELU's inner term, in codegen's order.
fn gelu_tanh<T: Arith>(x: T) -> T {
    let (c, k) = (T::from_f32(GELU_C), T::from_f32(GELU_K));
    c.mul(x.add(k.mul(x.mul(x).mul(x)))).tanh()
}

/// GELU's derivative at `x`: `½(1 + t) + ½x·((1 - t²)·c(1 + 3k x²))`, in codegen's order.
fn gelu_grad<T: Arith>(x: T) -> T {
    let (half, one) = (T::from_f32(0.5), T::from_f32(1.0));
    let (c, k3) = (T::from_f32(GELU_C), T::from_f32(3.0 * GELU_K));
    let t = gelu_tanh(x);
    let left = half.mul(one.add(t));
    let du = c.mul(one.add(k3.mul(x.mul(x))));
    left.add(half.mul(x).mul(one.sub(t.mul(t)).mul(du)))
}

/// One row of an op's forward function (`b` is ignored by unary ops).
fn forward_row<T: Arith>(op: Elementwise, a: &[T], b: &[T], out: &mut Vec<T>) {
    let pairs = || a.iter().zip(b);
    match op {
        Elementwise::Unary(UnaryFn::Relu) => out.extend(a.iter().map(|&x| x.relu())),
        Elementwise::Unary(UnaryFn::Sigmoid) => out.extend(a.iter().map(|&x| x.sigmoid())),
        Elementwise::Unary(UnaryFn::Tanh) => out.extend(a.iter().map(|&x| x.tanh())),
        Elementwise::Unary(UnaryFn::Exp) => out.extend(a.iter().map(|&x| x.exp())),
        Elementwise::Unary(UnaryFn::Log) => out.extend(a.iter().map(|&x| x.log())),
        Elementwise::Unary(UnaryFn::Neg) => out.extend(a.iter().map(|&x| x.neg())),
        Elementwise::Unary(UnaryFn::Gelu) => {
            let (half, one) = (T::from_f32(0.5), T::from_f32(1.0));
            out.extend(a.iter().map(|&x| half.mul(x).mul(one.add(gelu_tanh(x)))))
        }
        Elementwise::Binary(BinaryFn::Add) => out.extend(pairs().map(|(&x, &y)| x.add(y))),
        Elementwise::Binary(BinaryFn::Sub) => out.extend(pairs().map(|(&x, &y)| x.sub(y))),
        Elementwise::Binary(BinaryFn::Mul) => out.extend(pairs().map(|(&x, &y)| x.mul(y))),
        Elementwise::Binary(BinaryFn::Div) => out.extend(pairs().map(|(&x, &y)| x.div(y))),
        Elementwise::Unary(UnaryFn::Softmax | UnaryFn::LogSoftmax | UnaryFn::LayerNorm) => {
            unreachable!("KernelSpec::new refuses row-wise functions")
        }
    }
}

/// One row of an op's operand gradient terms, given the output gradient `g`, the
/// operands `a`, `b` and the result `y`. The JIT computes the same expressions in the
/// same order (`codegen`'s `op_gradients`).
fn backward_row<T: Arith>(op: Elementwise, g: &[T], a: &[T], b: &[T], y: &[T], ga: &mut Vec<T>, gb: &mut Vec<T>) {
    let one = T::from_f32(1.0);
    match op {
        Elementwise::Unary(UnaryFn::Relu) => ga.extend(a.iter().zip(g).map(|(&x, &g)| x.relu_grad(g))),
        Elementwise::Unary(UnaryFn::Neg) => ga.extend(g.iter().map(|&g| g.neg())),
        Elementwise::Unary(UnaryFn::Gelu) => ga.extend(a.iter().zip(g).map(|(&x, &g)| g.mul(gelu_grad(x)))),
        Elementwise::Unary(UnaryFn::Exp) => ga.extend(g.iter().zip(y).map(|(&g, &y)| g.mul(y))),
        Elementwise::Unary(UnaryFn::Log) => ga.extend(g.iter().zip(a).map(|(&g, &x)| g.div(x))),
        Elementwise::Unary(UnaryFn::Tanh) => ga.extend(g.iter().zip(y).map(|(&g, &y)| g.mul(one.sub(y.mul(y))))),
        Elementwise::Unary(UnaryFn::Sigmoid) => ga.extend(g.iter().zip(y).map(|(&g, &y)| g.mul(y.mul(one.sub(y))))),
        Elementwise::Binary(BinaryFn::Add) => {
            ga.extend_from_slice(g);
            gb.extend_from_slice(g);
        }
        Elementwise::Binary(BinaryFn::Sub) => {
            ga.extend_from_slice(g);
            gb.extend(g.iter().map(|&g| g.neg()));
        }
        Elementwise::Binary(BinaryFn::Mul) => {
            ga.extend(g.iter().zip(b).map(|(&g, &b)| g.mul(b)));
            gb.extend(g.iter().zip(a).map(|(&g, &a)| g.mul(a)));
        }
        // d(a/b)/db = -a/b² = -(g/b)·y: no b² to overflow.
        Elementwise::Binary(BinaryFn::Div) => {
            let start = ga.len();
            ga.extend(g.iter().zip(b).map(|(&g, &b)| g.div(b)));
            gb.extend(ga[start..].iter().zip(y).map(|(&q, &y)| q.mul(y).neg()));
        }
        Elementwise::Unary(UnaryFn::Softmax | UnaryFn::LogSoftmax | UnaryFn::LayerNorm) => {
            unreachable!("KernelSpec::new refuses row-wise functions")
        }
    }
}
