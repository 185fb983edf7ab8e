//! The kernels' backward function against central finite differences of their forward
//! function, both run by the interpreter in f64, along random directions. In f64 the
//! check sees the backward's formulas, not f32 rounding: a gradient that cancels
//! (`x / x`) leaves an f32 residual of about eps / |x|, which no tolerance on the
//! gradient's own size allows. `differential.rs` holds the JIT to the interpreter.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::{compile, output_lens, Rng};
use crate::differential::spec_strategy;
use amp_ir::UnaryFn;
use amp_jit::{interpret, Arith, Kernel, Pass};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
struct F64(f64);

impl Arith for F64 {
    fn from_f32(x: f32) -> Self {
        F64(f64::from(x))
    }
    fn add(self, o: Self) -> Self {
        F64(self.0 + o.0)
    }
    fn sub(self, o: Self) -> Self {
        F64(self.0 - o.0)
    }
    fn mul(self, o: Self) -> Self {
        F64(self.0 * o.0)
    }
    fn div(self, o: Self) -> Self {
        F64(self.0 / o.0)
    }
    fn neg(self) -> Self {
        F64(-self.0)
    }
    fn relu(self) -> Self {
        F64(if self.0 < 0.0 { 0.0 } else { self.0 })
    }
    fn relu_grad(self, g: Self) -> Self {
        F64(if self.0 <= 0.0 { 0.0 } else { g.0 })
    }
    fn exp(self) -> Self {
        F64(self.0.exp())
    }
    fn log(self) -> Self {
        F64(self.0.ln())
    }
    fn tanh(self) -> Self {
        F64(self.0.tanh())
    }
    fn sigmoid(self) -> Self {
        F64(1.0 / (1.0 + (-self.0).exp()))
    }
    fn sum(terms: &[Self]) -> Self {
        F64(terms.iter().map(|t| t.0).sum())
    }
}

/// `Σ_j w_j · output_j(x)` in f64.
fn loss(kernel: &Kernel, rows: usize, x: &[Vec<f64>], weights: &[Vec<f32>]) -> f64 {
    let ins: Vec<Vec<F64>> = x.iter().map(|b| b.iter().map(|&v| F64(v)).collect()).collect();
    let ins: Vec<&[F64]> = ins.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<Vec<F64>> =
        output_lens(kernel, Pass::Forward, rows).into_iter().map(|n| vec![F64(0.0); n]).collect();
    let mut out_refs: Vec<&mut [F64]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    interpret(kernel.spec(), Pass::Forward, rows, &ins, &mut out_refs).expect("well formed");
    outs.iter().zip(weights).flat_map(|(o, w)| o.iter().zip(w).map(|(o, &w)| o.0 * f64::from(w))).sum()
}

/// `Some(true)` when the backward matches, `None` when finite differences are unreliable
/// there (a kink, a pole, a NaN), `Some(false)` on a mismatch.
fn directional_check(kernel: &Kernel, rows: usize, seed: u64) -> Option<bool> {
    let spec = kernel.spec();
    let mut rng = Rng::new(seed);
    let x: Vec<Vec<f32>> = spec
        .inputs()
        .iter()
        .map(|&w| (0..spec.buffer_len(w, rows).unwrap()).map(|_| rng.uniform(-2.0, 2.0)).collect())
        .collect();
    let weights: Vec<Vec<f32>> = output_lens(kernel, Pass::Forward, rows)
        .into_iter()
        .map(|n| (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect())
        .collect();
    let direction: Vec<Vec<f64>> =
        x.iter().map(|b| b.iter().map(|_| f64::from(rng.uniform(-1.0, 1.0))).collect()).collect();
    let backward_in: Vec<Vec<F64>> =
        x.iter().chain(&weights).map(|b| b.iter().map(|&v| F64(f64::from(v))).collect()).collect();
    let backward_in: Vec<&[F64]> = backward_in.iter().map(Vec::as_slice).collect();
    let mut grads: Vec<Vec<F64>> =
        output_lens(kernel, Pass::Backward, rows).into_iter().map(|n| vec![F64(0.0); n]).collect();
    let mut grad_refs: Vec<&mut [F64]> = grads.iter_mut().map(Vec::as_mut_slice).collect();
    interpret(spec, Pass::Backward, rows, &backward_in, &mut grad_refs).expect("well formed");
    let products = grads.iter().zip(&direction).flat_map(|(g, d)| g.iter().zip(d).map(|(g, &d)| g.0 * d));
    let (analytic, scale) = products.fold((0.0, 0.0), |(s, a), p| (s + p, a + p.abs()));
    let fd = |h: f64| {
        let shifted = |sign: f64| -> Vec<Vec<f64>> {
            x.iter()
                .zip(&direction)
                .map(|(b, d)| b.iter().zip(d).map(|(&v, &d)| f64::from(v) + sign * h * d).collect())
                .collect()
        };
        (loss(kernel, rows, &shifted(1.0), &weights) - loss(kernel, rows, &shifted(-1.0), &weights)) / (2.0 * h)
    };
    let (coarse, fine) = (fd(1e-4), fd(5e-5));
    let magnitude = scale + fine.abs();
    // Where the loss is smooth the two estimates differ by O(h²) (~1e-8 relative); a kink
    // (relu at 0) or a pole within reach makes them differ by far more: inconclusive.
    let smooth = (coarse - fine).abs() <= 1e-6 * magnitude + 1e-9;
    if !(coarse.is_finite() && fine.is_finite() && analytic.is_finite() && smooth) {
        return None;
    }
    // Both in f64: `fine`'s own error is about a third of the estimates' difference.
    Some((analytic - fine).abs() <= 1e-5 * magnitude + 1e-8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn backward_matches_finite_differences(spec in spec_strategy(), rows in 1usize..=2, seed in any::<u64>()) {
        let kernel = compile(&spec);
        let verdict = directional_check(&kernel, rows, seed);
        prop_assert!(verdict != Some(false), "{}", spec.describe());
    }
}

/// A shrunk failure of the finite-difference test itself: both step sizes crossed a relu
/// kink, and their estimates agreed to the former (too loose) smoothness tolerance.
#[test]
fn regression_relu_kink_is_inconclusive_not_a_mismatch() {
    let spec = amp_jit::KernelSpec::new(
        150,
        vec![amp_jit::Width::Vector],
        vec![amp_jit::SpecOp { op: amp_jit::Elementwise::Unary(UnaryFn::Relu), args: vec![amp_jit::ValueId(0)] }],
        vec![amp_jit::ValueId(1)],
    )
    .unwrap();
    assert_ne!(directional_check(&compile(&spec), 2, 10361504825608736179), Some(false));
}

#[test]
fn finite_differences_are_mostly_conclusive() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut conclusive, mut total) = (0, 0);
    for seed in 0..60 {
        let spec = spec_strategy().new_tree(&mut runner).expect("a spec").current();
        let kernel = compile(&spec);
        total += 1;
        match directional_check(&kernel, 2, seed) {
            Some(true) => conclusive += 1,
            Some(false) => panic!("{}", spec.describe()),
            None => {}
        }
    }
    assert!(conclusive * 2 > total, "{conclusive} of {total} conclusive");
}
