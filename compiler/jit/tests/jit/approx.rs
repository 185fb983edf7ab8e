//! The approximations' error over dense sweeps of `f32`: every `stride`-th float of each
//! range (all of them in the ignored exhaustive test), against f64 references.

use crate::common::{run_kernel, single_op_kernel, single_op_kernel_in};
use amp_ir::UnaryFn;
use amp_jit::KernelCache;
use amp_jit::{max_rel_error, Elementwise, Pass};

/// Maps an f32 to an integer that orders like the float (for walking ranges).
fn ordered(x: f32) -> i64 {
    let bits = x.to_bits();
    if bits >> 31 == 1 {
        -i64::from(bits & 0x7fff_ffff)
    } else {
        i64::from(bits)
    }
}

fn from_ordered(k: i64) -> f32 {
    if k < 0 {
        f32::from_bits((-k) as u32 | 0x8000_0000)
    } else {
        f32::from_bits(k as u32)
    }
}

fn reference(op: Elementwise, x: f64) -> f64 {
    match op {
        Elementwise::Unary(UnaryFn::Exp) => x.exp(),
        Elementwise::Unary(UnaryFn::Log) => x.ln(),
        Elementwise::Unary(UnaryFn::Tanh) => x.tanh(),
        Elementwise::Unary(UnaryFn::Sigmoid) => 1.0 / (1.0 + (-x).exp()),
        _ => unreachable!(),
    }
}

pub struct Sweep {
    pub max_rel: f64,
    pub worst_x: f32,
    /// Largest absolute error where the exact result is below f32's smallest normal.
    pub max_abs_subnormal: f64,
    pub points: usize,
}

/// Sweeps `[lo, hi]` with the given stride over the ordered floats.
pub fn sweep(op: Elementwise, lo: f32, hi: f32, stride: i64, cache: &mut KernelCache) -> Sweep {
    let kernel = single_op_kernel_in(cache, op, 1 << 16);
    let mut result = Sweep { max_rel: 0.0, worst_x: 0.0, max_abs_subnormal: 0.0, points: 0 };
    let (start, end) = (ordered(lo), ordered(hi));
    let mut k = start;
    let mut xs = Vec::with_capacity(1 << 16);
    while k <= end {
        xs.clear();
        while xs.len() < 1 << 16 {
            xs.push(from_ordered(k.min(end)));
            k += stride;
        }
        let ys = &run_kernel(&kernel, Pass::Forward, 1, &[xs.clone()])[0];
        for (&x, &y) in xs.iter().zip(ys) {
            let exact = reference(op, f64::from(x));
            result.points += 1;
            if exact.abs() < f64::from(f32::MIN_POSITIVE) {
                result.max_abs_subnormal = result.max_abs_subnormal.max((f64::from(y) - exact).abs());
                continue;
            }
            // Where the exact value rounds to infinity, the kernel must give infinity.
            if exact.abs() > f64::from(f32::MAX) {
                let rounds_to_inf = exact.abs() >= f64::from(f32::MAX) * (1.0 + 2f64.powi(-24));
                assert!(y.is_infinite() || !rounds_to_inf, "{op}({x}) = {y}, expected ±inf");
                continue;
            }
            let rel = ((f64::from(y) - exact) / exact).abs();
            assert!(!rel.is_nan(), "{op}({x}) = {y}");
            if rel > result.max_rel {
                result.max_rel = rel;
                result.worst_x = x;
            }
        }
    }
    result
}

/// The sweeps: every f32 (every positive one for `log`); relative errors are measured
/// where the exact result is a normal f32 (`math`'s table), absolute errors below.
pub fn ranges() -> [(Elementwise, f32, f32, f64); 4] {
    [
        (Elementwise::Unary(UnaryFn::Exp), f32::MIN, f32::MAX, max_rel_error::EXP),
        (Elementwise::Unary(UnaryFn::Log), f32::from_bits(1), f32::MAX, max_rel_error::LOG),
        (Elementwise::Unary(UnaryFn::Tanh), f32::MIN, f32::MAX, max_rel_error::TANH),
        (Elementwise::Unary(UnaryFn::Sigmoid), f32::MIN, f32::MAX, max_rel_error::SIGMOID),
    ]
}

fn check_all(stride_for: impl Fn(f32, f32) -> i64) {
    for allow_fma in [true, false] {
        let mut cache = KernelCache::with_fma(allow_fma).expect("a JIT");
        if allow_fma && !cache.uses_fma() {
            continue;
        }
        for (op, lo, hi, bound) in ranges() {
            let s = sweep(op, lo, hi, stride_for(lo, hi), &mut cache);
            println!(
                "{op} (fma: {}): {} points in [{lo:e}, {hi:e}]: max relative error {:.3e} at x = {:e}; subnormal results: max absolute error {:.1e}",
                cache.uses_fma(), s.points, s.max_rel, s.worst_x, s.max_abs_subnormal
            );
            assert!(s.max_rel <= bound, "{op}: {:.3e} > documented {bound:e} (at {:e})", s.max_rel, s.worst_x);
            assert!(s.max_abs_subnormal < 1e-38, "{op}: subnormal error {:e}", s.max_abs_subnormal);
        }
    }
}

#[test]
fn approximation_errors_within_documented_bounds() {
    // About 2^20 points per function, spread evenly over the ordered floats.
    check_all(|lo, hi| ((ordered(hi) - ordered(lo)) >> 20).max(1));
}

#[test]
#[ignore = "every f32 of each range: run with --release -- --ignored exhaustive --nocapture"]
fn exhaustive_approximation_errors() {
    check_all(|_, _| 1);
}

#[test]
fn special_values() {
    let cases: [(Elementwise, f32, f32); 16] = [
        (Elementwise::Unary(UnaryFn::Exp), f32::INFINITY, f32::INFINITY),
        (Elementwise::Unary(UnaryFn::Exp), f32::NEG_INFINITY, 0.0),
        (Elementwise::Unary(UnaryFn::Exp), 88.73, f32::INFINITY),
        (Elementwise::Unary(UnaryFn::Exp), -200.0, 0.0),
        (Elementwise::Unary(UnaryFn::Exp), 0.0, 1.0),
        (Elementwise::Unary(UnaryFn::Log), 0.0, f32::NEG_INFINITY),
        (Elementwise::Unary(UnaryFn::Log), -0.0, f32::NEG_INFINITY),
        (Elementwise::Unary(UnaryFn::Log), f32::INFINITY, f32::INFINITY),
        (Elementwise::Unary(UnaryFn::Log), 1.0, 0.0),
        (Elementwise::Unary(UnaryFn::Tanh), f32::INFINITY, 1.0),
        (Elementwise::Unary(UnaryFn::Tanh), f32::NEG_INFINITY, -1.0),
        (Elementwise::Unary(UnaryFn::Tanh), -0.0, -0.0),
        (Elementwise::Unary(UnaryFn::Sigmoid), f32::INFINITY, 1.0),
        (Elementwise::Unary(UnaryFn::Sigmoid), f32::NEG_INFINITY, 0.0),
        (Elementwise::Unary(UnaryFn::Relu), -0.0, -0.0),
        (Elementwise::Unary(UnaryFn::Relu), -3.0, 0.0),
    ];
    for (op, x, expected) in cases {
        // Lane and tail paths: n = 5 puts x in the vector loop and in the tail.
        let kernel = single_op_kernel(op, 5);
        let y = &run_kernel(&kernel, Pass::Forward, 1, &[vec![x; 5]])[0];
        for &y in y {
            assert!(
                y == expected && y.is_sign_negative() == expected.is_sign_negative(),
                "{op}({x}) = {y}, expected {expected}"
            );
        }
    }
    for op in Elementwise::all().filter(|op| op.arity() == 1) {
        let kernel = single_op_kernel(op, 5);
        let y = &run_kernel(&kernel, Pass::Forward, 1, &[vec![f32::NAN; 5]])[0];
        assert!(y.iter().all(|y| y.is_nan()), "{op}(NaN) = {y:?}");
    }
    let kernel = single_op_kernel(Elementwise::Unary(UnaryFn::Log), 5);
    let y = &run_kernel(&kernel, Pass::Forward, 1, &[vec![-1.0; 5]])[0];
    assert!(y.iter().all(|y| y.is_nan()), "log(-1) = {y:?}");
}
