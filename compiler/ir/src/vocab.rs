//! The function vocabulary of `unary` and `binary` nodes: one table per kind, one row per
//! function, read by every stage that needs to know something about a function.
//!
//! In: nothing. Out: [`UnaryFn`], [`BinaryFn`] and their rows ([`UnarySpec`],
//! [`BinarySpec`]): the name (the text form's spelling, the `.ampg` variant's meaning and
//! the Amp language's built-in of the same name), the arity, whether the function maps
//! each element on its own (the JIT fuses only those) or each row of the last dimension
//! (`softmax`), whether it is differentiable, and the scalar function with its gradient.
//!
//! Who reads it: the text form (print and parse), the verifier (names, which functions
//! need a rank), constant folding (`amp-lower`'s passes fold with [`UnaryScalar::forward`]),
//! the JIT's kernel spec (which ops fuse, which values a saving forward keeps), the
//! planner's cost model ([`UnarySpec::flops`]), the executor's unary and binary ops and the
//! reference's tape (both compute with the same scalar functions, so they agree bit for
//! bit on every elementwise function). What cannot live here is code generation (Cranelift
//! instructions in `amp-jit`'s `codegen.rs`, and its interpreter twin `interp.rs`) and the
//! row-wise functions' loops; those match on the enum, so the compiler lists every place a
//! new function must be handled.
//!
//! Invariant: row `i` of [`UNARY`] ([`BINARY`]) describes the variant whose discriminant
//! is `i` (tested), so a lookup is an index.

use serde::{Deserialize, Serialize};

/// A function of one tensor. The variants' serde names are the `.ampg` spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UnaryFn {
    Relu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Neg,
    Softmax,
    LogSoftmax,
    Gelu,
    LayerNorm,
}

/// Elementwise arithmetic of two tensors of one shape, or of a tensor and a scalar
/// broadcast over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
}

/// How a unary function reads its input.
#[derive(Clone, Copy, Debug)]
pub enum UnaryShape {
    /// Each element on its own: any shape, fusable by the JIT, foldable on constants.
    Elementwise(UnaryScalar),
    /// Each row of the last dimension together (a tensor of rank at least 1).
    Rowwise(RowFns),
}

/// The row function of a row-wise unary function.
#[derive(Clone, Copy, Debug)]
pub struct RowFns {
    /// `y = f(x)` of one row (`y` as long as `x`).
    pub forward: fn(&[f32], &mut [f32]),
    /// `dx` of one row from the input, the output and `dy` (all as long as `x`).
    pub backward: RowBackward,
}

/// `(x, y, dy, dx)`: writes `dx` of one row.
pub type RowBackward = fn(&[f32], &[f32], &[f32], &mut [f32]);

/// The scalar function of an elementwise unary function.
#[derive(Clone, Copy, Debug)]
pub struct UnaryScalar {
    /// `y = f(x)`.
    pub forward: fn(f32) -> f32,
    /// `dx` from the input `x`, the output `y` and the gradient `dy`.
    pub backward: fn(f32, f32, f32) -> f32,
}

/// One row of the unary table.
#[derive(Clone, Copy, Debug)]
pub struct UnarySpec {
    pub f: UnaryFn,
    /// The spelling in the IR text form and the Amp built-in of this name, if any.
    pub name: &'static str,
    pub shape: UnaryShape,
    /// Whether gradients flow through it: `Graph::parameter_dependent` stops at a node
    /// whose function is not (every function today is; one that is not would also send
    /// zeros from its backward).
    pub differentiable: bool,
    /// An exponential or a division per element: the JIT's saving forward keeps its vector
    /// values for the backward instead of computing them again.
    pub transcendental: bool,
    /// Forward FLOPs per element the planner's cost model charges.
    pub flops: f64,
}

/// The scalar function of a binary function.
#[derive(Clone, Copy, Debug)]
pub struct BinaryScalar {
    /// `y = f(a, b)`.
    pub forward: fn(f32, f32) -> f32,
    /// `(da, db)` from the inputs and the gradient `dy`.
    pub backward: fn(f32, f32, f32) -> (f32, f32),
}

/// One row of the binary table.
#[derive(Clone, Copy, Debug)]
pub struct BinarySpec {
    pub f: BinaryFn,
    /// The spelling in the IR text form (the Amp language writes it as an operator).
    pub name: &'static str,
    pub scalar: BinaryScalar,
}

/// Every unary function, in discriminant order.
pub const UNARY: [UnarySpec; 10] = [
    UnarySpec {
        f: UnaryFn::Relu,
        name: "relu",
        // As PyTorch: a NaN stays NaN (so a bad value reaches the loss and is reported).
        shape: elementwise(|x| if x < 0.0 { 0.0 } else { x }, |x, _, g| if x > 0.0 { g } else { 0.0 }),
        differentiable: true,
        transcendental: false,
        flops: 1.0,
    },
    UnarySpec {
        f: UnaryFn::Sigmoid,
        name: "sigmoid",
        shape: elementwise(|x| 1.0 / (1.0 + (-x).exp()), |_, y, g| g * y * (1.0 - y)),
        differentiable: true,
        transcendental: true,
        flops: 4.0,
    },
    UnarySpec {
        f: UnaryFn::Tanh,
        name: "tanh",
        shape: elementwise(f32::tanh, |_, y, g| g * (1.0 - y * y)),
        differentiable: true,
        transcendental: true,
        flops: 4.0,
    },
    UnarySpec {
        f: UnaryFn::Exp,
        name: "exp",
        shape: elementwise(f32::exp, |_, y, g| g * y),
        differentiable: true,
        transcendental: true,
        flops: 4.0,
    },
    UnarySpec {
        f: UnaryFn::Log,
        name: "log",
        shape: elementwise(f32::ln, |x, _, g| g / x),
        differentiable: true,
        transcendental: true,
        flops: 4.0,
    },
    UnarySpec {
        f: UnaryFn::Neg,
        name: "neg",
        shape: elementwise(|x| -x, |_, _, g| -g),
        differentiable: true,
        transcendental: false,
        flops: 1.0,
    },
    UnarySpec {
        f: UnaryFn::Softmax,
        name: "softmax",
        shape: UnaryShape::Rowwise(RowFns { forward: softmax_row, backward: softmax_row_backward }),
        differentiable: true,
        transcendental: false,
        flops: 6.0,
    },
    UnarySpec {
        f: UnaryFn::LogSoftmax,
        name: "log_softmax",
        shape: UnaryShape::Rowwise(RowFns { forward: log_softmax_row, backward: log_softmax_row_backward }),
        differentiable: true,
        transcendental: false,
        flops: 6.0,
    },
    UnarySpec {
        f: UnaryFn::Gelu,
        name: "gelu",
        shape: elementwise(gelu, gelu_backward),
        differentiable: true,
        // Its backward needs `tanh` of the inner term, not the output: nothing to keep.
        transcendental: false,
        flops: 10.0,
    },
    UnarySpec {
        f: UnaryFn::LayerNorm,
        name: "layer_norm",
        shape: UnaryShape::Rowwise(RowFns { forward: layer_norm_row, backward: layer_norm_row_backward }),
        differentiable: true,
        transcendental: false,
        flops: 8.0,
    },
];

/// `f` applied to each row of `width` values of `x` (a row-wise function's
/// [`RowFns::forward`]); `x` as it is when `width` is 0.
pub fn map_rows(f: fn(&[f32], &mut [f32]), x: &[f32], width: usize) -> Vec<f32> {
    let mut y = x.to_vec();
    if width > 0 {
        for (x, y) in x.chunks(width).zip(y.chunks_mut(width)) {
            f(x, y);
        }
    }
    y
}

/// Softmax over each row of `width` values: what `unary softmax` computes.
pub fn softmax_rows(x: &[f32], width: usize) -> Vec<f32> {
    map_rows(softmax_row, x, width)
}

/// Log-softmax over each row of `width` values: what `unary log_softmax` and the
/// cross-entropy loss compute.
pub fn log_softmax_rows(x: &[f32], width: usize) -> Vec<f32> {
    map_rows(log_softmax_row, x, width)
}

/// `exp(x - max) / sum(exp(x - max))`.
fn softmax_row(x: &[f32], y: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - max).exp();
        sum += *y;
    }
    y.iter_mut().for_each(|y| *y /= sum);
}

/// `dx = y (dy - <dy, y>)`.
fn softmax_row_backward(_: &[f32], y: &[f32], dy: &[f32], dx: &mut [f32]) {
    let inner: f32 = y.iter().zip(dy).map(|(y, g)| y * g).sum();
    for ((dx, &y), &g) in dx.iter_mut().zip(y).zip(dy) {
        *dx = y * (g - inner);
    }
}

/// `(x - max) - log(sum(exp(x - max)))`: exact shifts first, as PyTorch does, so large
/// logits keep their precision.
fn log_softmax_row(x: &[f32], y: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_sum = x.iter().map(|&x| (x - max).exp()).sum::<f32>().ln();
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - max) - log_sum;
    }
}

/// `dx = dy - softmax(x) sum(dy)`, `softmax(x) = exp(y)`.
fn log_softmax_row_backward(_: &[f32], y: &[f32], dy: &[f32], dx: &mut [f32]) {
    let total: f32 = dy.iter().sum();
    for ((dx, &y), &g) in dx.iter_mut().zip(y).zip(dy) {
        *dx = g - y.exp() * total;
    }
}

/// PyTorch's `nn.LayerNorm` epsilon.
pub const LAYER_NORM_EPS: f32 = 1e-5;

/// `(x - mean) / sqrt(var + eps)` with the biased variance, as PyTorch's `layer_norm`
/// without its affine part.
fn layer_norm_row(x: &[f32], y: &mut [f32]) {
    let n = x.len().max(1) as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|&x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + LAYER_NORM_EPS).sqrt();
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - mean) * inv;
    }
}

/// `dx = (dy - mean(dy) - y mean(dy y)) / sqrt(var + eps)`, the inverse deviation taken
/// again from `x`.
fn layer_norm_row_backward(x: &[f32], y: &[f32], dy: &[f32], dx: &mut [f32]) {
    let n = x.len().max(1) as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|&x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + LAYER_NORM_EPS).sqrt();
    let mean_g = dy.iter().sum::<f32>() / n;
    let mean_gy = dy.iter().zip(y).map(|(g, y)| g * y).sum::<f32>() / n;
    for ((dx, &y), &g) in dx.iter_mut().zip(y).zip(dy) {
        *dx = inv * (g - mean_g - y * mean_gy);
    }
}

/// `sqrt(2 / pi)` and the cubic coefficient of GELU's tanh form.
pub const GELU_C: f32 = 0.797_884_6;
pub const GELU_K: f32 = 0.044_715;

/// GELU in its tanh form (PyTorch's `gelu(x, approximate="tanh")`, as in BERT and GPT-2):
/// `x/2 · (1 + tanh(c (x + k x³)))`.
fn gelu(x: f32) -> f32 {
    let t = (GELU_C * (x + GELU_K * (x * x * x))).tanh();
    0.5 * x * (1.0 + t)
}

/// `dy/dx · g = (½(1 + t) + ½x (1 - t²) c (1 + 3k x²)) · g`, `t` computed again from `x`.
fn gelu_backward(x: f32, _: f32, g: f32) -> f32 {
    let x2 = x * x;
    let t = (GELU_C * (x + GELU_K * (x2 * x))).tanh();
    let d = 0.5 * (1.0 + t) + 0.5 * x * ((1.0 - t * t) * (GELU_C * (1.0 + 3.0 * GELU_K * x2)));
    g * d
}

/// Every binary function, in discriminant order.
pub const BINARY: [BinarySpec; 4] = [
    BinarySpec { f: BinaryFn::Add, name: "add", scalar: binary(|a, b| a + b, |_, _, g| (g, g)) },
    BinarySpec { f: BinaryFn::Sub, name: "sub", scalar: binary(|a, b| a - b, |_, _, g| (g, -g)) },
    BinarySpec { f: BinaryFn::Mul, name: "mul", scalar: binary(|a, b| a * b, |a, b, g| (g * b, g * a)) },
    BinarySpec { f: BinaryFn::Div, name: "div", scalar: binary(|a, b| a / b, |a, b, g| (g / b, -g * a / (b * b))) },
];

const fn elementwise(forward: fn(f32) -> f32, backward: fn(f32, f32, f32) -> f32) -> UnaryShape {
    UnaryShape::Elementwise(UnaryScalar { forward, backward })
}

const fn binary(forward: fn(f32, f32) -> f32, backward: fn(f32, f32, f32) -> (f32, f32)) -> BinaryScalar {
    BinaryScalar { forward, backward }
}

impl UnaryFn {
    /// Every unary function, in table order.
    pub fn all() -> impl Iterator<Item = UnaryFn> {
        UNARY.iter().map(|row| row.f)
    }

    /// Its row of [`UNARY`].
    pub fn spec(self) -> &'static UnarySpec {
        &UNARY[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The function spelled `name` (the IR text form's and the Amp built-in's spelling).
    pub fn from_name(name: &str) -> Option<UnaryFn> {
        UNARY.iter().find(|row| row.name == name).map(|row| row.f)
    }

    /// The scalar function of an elementwise function; `None` for a row-wise one.
    pub fn scalar(self) -> Option<UnaryScalar> {
        match self.spec().shape {
            UnaryShape::Elementwise(scalar) => Some(scalar),
            UnaryShape::Rowwise(_) => None,
        }
    }

    pub fn is_elementwise(self) -> bool {
        self.scalar().is_some()
    }

    /// The row function of a row-wise function; `None` for an elementwise one.
    pub fn rows(self) -> Option<RowFns> {
        match self.spec().shape {
            UnaryShape::Rowwise(rows) => Some(rows),
            UnaryShape::Elementwise(_) => None,
        }
    }

    /// `f` of each row of `width` values (the whole of `x` when `width` is 0); `None` for
    /// an elementwise function.
    pub fn forward_rows(self, x: &[f32], width: usize) -> Option<Vec<f32>> {
        let rows = self.rows()?;
        let width = if width == 0 { x.len().max(1) } else { width };
        let mut y = vec![0.0; x.len()];
        for (xr, yr) in x.chunks(width).zip(y.chunks_mut(width)) {
            (rows.forward)(xr, yr);
        }
        Some(y)
    }

    /// `dx` of each row of `width` values (the whole payload when 0) from the input, the
    /// output and `dy` (all of one length); `None` for an elementwise function.
    pub fn backward_rows(self, x: &[f32], y: &[f32], dy: &[f32], width: usize) -> Option<Vec<f32>> {
        let rows = self.rows()?;
        let width = if width == 0 { x.len().max(1) } else { width };
        let mut dx = vec![0.0; x.len()];
        for (((xr, yr), gr), dr) in x.chunks(width).zip(y.chunks(width)).zip(dy.chunks(width)).zip(dx.chunks_mut(width))
        {
            (rows.backward)(xr, yr, gr, dr);
        }
        Some(dx)
    }
}

/// Code generic over an elementwise unary function, run by [`UnaryFn::with_scalar`] with
/// the function's scalar forward and backward as closures of their own types: each
/// function gets its own copy of the caller's loops, in which the call is direct, inlines
/// and vectorises (through a function pointer chosen at run time, a call per element made
/// the executor's relu backward 2.6 times slower).
pub trait UnaryKernel {
    type Output;
    fn run(self, forward: impl Fn(f32) -> f32 + Copy, backward: impl Fn(f32, f32, f32) -> f32 + Copy) -> Self::Output;
}

/// As [`UnaryKernel`], for [`BinaryFn::with_scalar`].
pub trait BinaryKernel {
    type Output;
    fn run(
        self,
        forward: impl Fn(f32, f32) -> f32 + Copy,
        backward: impl Fn(f32, f32, f32) -> (f32, f32) + Copy,
    ) -> Self::Output;
}

/// The scalar function of unary row `i`, at compile time (a row-wise one is a compile
/// error where this is evaluated in a `const` block, so only elementwise rows can be
/// instantiated).
const fn unary_scalar_at(i: usize) -> UnaryScalar {
    match UNARY[i].shape {
        UnaryShape::Elementwise(scalar) => scalar,
        UnaryShape::Rowwise(_) => panic!("not an elementwise function"),
    }
}

/// `kernel` with unary row `I`'s functions: one instance per row.
fn run_unary<const I: usize, K: UnaryKernel>(kernel: K) -> K::Output {
    kernel
        .run(|x| (const { unary_scalar_at(I) }.forward)(x), |x, y, g| (const { unary_scalar_at(I) }.backward)(x, y, g))
}

fn run_binary<const I: usize, K: BinaryKernel>(kernel: K) -> K::Output {
    kernel.run(
        |a, b| (const { BINARY[I].scalar.forward })(a, b),
        |a, b, g| (const { BINARY[I].scalar.backward })(a, b, g),
    )
}

struct ForwardEach<'a>(&'a [f32]);

impl UnaryKernel for ForwardEach<'_> {
    type Output = Vec<f32>;
    fn run(self, forward: impl Fn(f32) -> f32 + Copy, _: impl Fn(f32, f32, f32) -> f32 + Copy) -> Vec<f32> {
        self.0.iter().map(|&v| forward(v)).collect()
    }
}

struct BackwardEach<'a>(&'a [f32], &'a [f32], &'a [f32]);

impl UnaryKernel for BackwardEach<'_> {
    type Output = Vec<f32>;
    fn run(self, _: impl Fn(f32) -> f32 + Copy, backward: impl Fn(f32, f32, f32) -> f32 + Copy) -> Vec<f32> {
        let BackwardEach(x, y, dy) = self;
        x.iter().zip(y).zip(dy).map(|((&x, &y), &g)| backward(x, y, g)).collect()
    }
}

impl UnaryFn {
    /// Runs `kernel` with this function's scalar functions (see [`UnaryKernel`]); `None`
    /// for a row-wise function. One arm per elementwise function.
    pub fn with_scalar<K: UnaryKernel>(self, kernel: K) -> Option<K::Output> {
        Some(match self {
            UnaryFn::Relu => run_unary::<{ UnaryFn::Relu as usize }, K>(kernel),
            UnaryFn::Sigmoid => run_unary::<{ UnaryFn::Sigmoid as usize }, K>(kernel),
            UnaryFn::Tanh => run_unary::<{ UnaryFn::Tanh as usize }, K>(kernel),
            UnaryFn::Exp => run_unary::<{ UnaryFn::Exp as usize }, K>(kernel),
            UnaryFn::Log => run_unary::<{ UnaryFn::Log as usize }, K>(kernel),
            UnaryFn::Neg => run_unary::<{ UnaryFn::Neg as usize }, K>(kernel),
            UnaryFn::Gelu => run_unary::<{ UnaryFn::Gelu as usize }, K>(kernel),
            UnaryFn::Softmax | UnaryFn::LogSoftmax | UnaryFn::LayerNorm => return None,
        })
    }

    /// `f` of each element of `x`; `None` for a row-wise function.
    pub fn forward_elements(self, x: &[f32]) -> Option<Vec<f32>> {
        self.with_scalar(ForwardEach(x))
    }

    /// `dx` of each element from the input, the output and `dy` (as many as the shortest
    /// has); `None` for a row-wise function.
    pub fn backward_elements(self, x: &[f32], y: &[f32], dy: &[f32]) -> Option<Vec<f32>> {
        self.with_scalar(BackwardEach(x, y, dy))
    }
}

impl BinaryFn {
    /// Every binary function, in table order.
    pub fn all() -> impl Iterator<Item = BinaryFn> {
        BINARY.iter().map(|row| row.f)
    }

    /// Its row of [`BINARY`].
    pub fn spec(self) -> &'static BinarySpec {
        &BINARY[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn from_name(name: &str) -> Option<BinaryFn> {
        BINARY.iter().find(|row| row.name == name).map(|row| row.f)
    }

    pub fn scalar(self) -> BinaryScalar {
        self.spec().scalar
    }

    /// Runs `kernel` with this function's scalar functions (see [`UnaryKernel`]).
    pub fn with_scalar<K: BinaryKernel>(self, kernel: K) -> K::Output {
        match self {
            BinaryFn::Add => run_binary::<{ BinaryFn::Add as usize }, K>(kernel),
            BinaryFn::Sub => run_binary::<{ BinaryFn::Sub as usize }, K>(kernel),
            BinaryFn::Mul => run_binary::<{ BinaryFn::Mul as usize }, K>(kernel),
            BinaryFn::Div => run_binary::<{ BinaryFn::Div as usize }, K>(kernel),
        }
    }
}

/// A function a fused kernel can compute: an elementwise unary function or a binary one.
/// Built only through [`Elementwise::unary`] or from a binary function, so it never holds a
/// row-wise function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elementwise {
    Unary(UnaryFn),
    Binary(BinaryFn),
}

impl Elementwise {
    /// `f` when it is elementwise.
    pub fn unary(f: UnaryFn) -> Option<Elementwise> {
        f.is_elementwise().then_some(Elementwise::Unary(f))
    }

    /// The function of a `unary` or `binary` op, when it is elementwise.
    pub fn of_op(op: &crate::Op) -> Option<Elementwise> {
        match op {
            crate::Op::Unary(f) => Elementwise::unary(*f),
            crate::Op::Binary(f) => Some(Elementwise::Binary(*f)),
            _ => None,
        }
    }

    /// Every elementwise function: the unary ones, then the binary ones.
    pub fn all() -> impl Iterator<Item = Elementwise> {
        UnaryFn::all().filter_map(Elementwise::unary).chain(BinaryFn::all().map(Elementwise::Binary))
    }

    pub fn arity(self) -> usize {
        match self {
            Elementwise::Unary(_) => 1,
            Elementwise::Binary(_) => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Elementwise::Unary(f) => f.name(),
            Elementwise::Binary(f) => f.name(),
        }
    }

    /// See [`UnarySpec::transcendental`]; binary arithmetic is not.
    pub fn transcendental(self) -> bool {
        matches!(self, Elementwise::Unary(f) if f.spec().transcendental)
    }
}

impl std::fmt::Display for Elementwise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmaxes_are_stable_and_agree_row_by_row() {
        let x = [1000.0, 1001.0, 999.0, -3.0, 0.5, 2.0];
        let s = softmax_rows(&x, 3);
        let l = log_softmax_rows(&x, 3);
        for row in s.chunks(3) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{row:?}");
        }
        for (a, b) in s.iter().zip(&l) {
            assert!((a.ln() - b).abs() < 1e-5, "{a} {b}");
        }
        assert_eq!(softmax_rows(&[], 0), Vec::<f32>::new());
    }

    #[test]
    fn rows_are_in_discriminant_order_and_names_are_unique() {
        for (i, row) in UNARY.iter().enumerate() {
            assert_eq!(row.f as usize, i, "{}", row.name);
            assert_eq!(UnaryFn::from_name(row.name), Some(row.f));
        }
        for (i, row) in BINARY.iter().enumerate() {
            assert_eq!(row.f as usize, i, "{}", row.name);
            assert_eq!(BinaryFn::from_name(row.name), Some(row.f));
        }
        let mut names: Vec<&str> = Elementwise::all().map(Elementwise::name).collect();
        names.extend(UNARY.iter().map(|row| row.name));
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        // Elementwise unary names appear twice (above), binary names once; rowwise once.
        assert_eq!(count - names.len(), UNARY.iter().filter(|row| row.f.is_elementwise()).count());
    }

    /// Each elementwise backward is the derivative of its forward (central differences in
    /// f64 of the f32 function, at points away from kinks).
    #[test]
    fn scalar_gradients_match_finite_differences() {
        let points = [-2.3f32, -0.7, 0.4, 1.9];
        let check = |name: &str, analytic: f32, f: &dyn Fn(f64) -> f64, x: f32| {
            let h = 1e-3;
            let numeric = (f(f64::from(x) + h) - f(f64::from(x) - h)) / (2.0 * h);
            let tolerance = 1e-2 * numeric.abs().max(1.0);
            assert!((f64::from(analytic) - numeric).abs() < tolerance, "{name} at {x}: {analytic} vs {numeric}");
        };
        for f in UnaryFn::all() {
            let Some(s) = f.scalar() else { continue };
            for &x in &points {
                let x = if f == UnaryFn::Log { x.abs() } else { x };
                let y = (s.forward)(x);
                check(f.name(), (s.backward)(x, y, 1.0), &|v| f64::from((s.forward)(v as f32)), x);
            }
        }
        for f in BinaryFn::all() {
            let s = f.scalar();
            for &a in &points {
                for &b in &points {
                    let (da, db) = (s.backward)(a, b, 1.0);
                    check(f.name(), da, &|v| f64::from((s.forward)(v as f32, b)), a);
                    check(f.name(), db, &|v| f64::from((s.forward)(a, v as f32)), b);
                }
            }
        }
    }

    /// Each row-wise backward is the vector-Jacobian product of its forward (central
    /// differences in f32 of a weighted sum of the outputs).
    #[test]
    fn row_gradients_match_finite_differences() {
        let x = [0.3f32, -1.2, 2.0, 0.7, -0.4];
        let w = [0.5f32, -1.0, 0.25, 2.0, 1.5];
        for f in UnaryFn::all().filter(|f| !f.is_elementwise()) {
            let y = f.forward_rows(&x, 0).expect("row-wise");
            let dx = f.backward_rows(&x, &y, &w, 0).expect("row-wise");
            let objective = |x: &[f32]| -> f64 {
                let y = f.forward_rows(x, 0).expect("row-wise");
                y.iter().zip(&w).map(|(y, w)| f64::from(y * w)).sum()
            };
            for i in 0..x.len() {
                let h = 1e-2f32;
                let (mut up, mut down) = (x, x);
                up[i] += h;
                down[i] -= h;
                let numeric = (objective(&up) - objective(&down)) / f64::from(2.0 * h);
                let err = (f64::from(dx[i]) - numeric).abs();
                assert!(err < 2e-3 * numeric.abs().max(1.0), "{} d/dx{i}: {} vs {numeric}", f.name(), dx[i]);
            }
        }
        // A normalised row has mean 0 and variance 1 (up to eps).
        let y = UnaryFn::LayerNorm.forward_rows(&x, 0).expect("row-wise");
        let mean = y.iter().sum::<f32>() / 5.0;
        let var = y.iter().map(|y| (y - mean) * (y - mean)).sum::<f32>() / 5.0;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-4, "{mean} {var}");
    }

    #[test]
    fn slice_loops_apply_the_table_functions() {
        let x = [-1.5f32, -0.0, 0.25, 3.0];
        let dy = [0.5f32, -2.0, 1.0, 0.125];
        for f in UnaryFn::all() {
            let Some(s) = f.scalar() else {
                assert_eq!(f.forward_elements(&x), None);
                continue;
            };
            let y = f.forward_elements(&x).expect("elementwise");
            let expected: Vec<f32> = x.iter().map(|&v| (s.forward)(v)).collect();
            assert_eq!(
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
            let dx = f.backward_elements(&x, &y, &dy).expect("elementwise");
            for i in 0..x.len() {
                assert_eq!(dx[i].to_bits(), (s.backward)(x[i], y[i], dy[i]).to_bits(), "{} at {}", f.name(), x[i]);
            }
        }
    }

    #[test]
    fn only_elementwise_functions_fuse() {
        assert_eq!(Elementwise::unary(UnaryFn::Softmax), None);
        assert_eq!(Elementwise::of_op(&crate::Op::Unary(UnaryFn::LogSoftmax)), None);
        assert_eq!(Elementwise::of_op(&crate::Op::Unary(UnaryFn::Tanh)), Some(Elementwise::Unary(UnaryFn::Tanh)));
        assert!(Elementwise::all().all(|e| e.arity() == 1 || matches!(e, Elementwise::Binary(_))));
    }
}
