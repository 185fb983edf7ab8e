//! Helpers shared by the integration tests: compiling programs, building instance data,
//! a small deterministic random generator, and the finite-difference gradient check.

#![allow(dead_code)] // each test file uses a different part

use amp_data::{Tensor, Value};
use amp_params::ParamSet;
use amp_reference::{param_specs, DropoutRun, Reference};
use amp_sema::{check_source, ComponentId, Options, Program};

/// Checks `text` with `-D` overrides; panics with the diagnostics if it has errors.
pub fn compile(text: &str, defines: &[(&str, i64)]) -> (Program, ComponentId) {
    let options = Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let (_map, checked) = check_source("test.amp", text, &options);
    if checked.has_errors() {
        let messages: Vec<String> = checked.diagnostics.iter().map(|d| format!("{} {}", d.code, d.message)).collect();
        panic!("the program has errors:\n{}", messages.join("\n"));
    }
    let model = checked.program.models[0];
    (checked.program, model)
}

/// The text of a canonical example (`examples/NAME.amp`).
pub fn example(name: &str) -> String {
    let path = format!("{}/../../examples/{name}.amp", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Parameters of `model` initialised from `seed`.
pub fn init_params(program: &Program, model: ComponentId, seed: u64) -> ParamSet {
    ParamSet::init(&param_specs(program, model).expect("specs"), seed)
}

pub fn tensor(data: Vec<f32>) -> Value {
    Value::Tensor(Tensor { shape: vec![data.len()], data })
}

pub fn ints(xs: &[i64]) -> Value {
    Value::Seq(xs.iter().map(|&x| Value::Int(x)).collect())
}

/// SplitMix64: small, deterministic, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

/// Whether an analytic derivative agrees with a finite difference, with a tolerance for
/// f32 arithmetic: absolute `abs` plus relative `rel` of the larger magnitude.
pub fn close(analytic: f64, numeric: f64, abs: f64, rel: f64) -> bool {
    (analytic - numeric).abs() <= abs + rel * analytic.abs().max(numeric.abs())
}

/// The step sizes of the finite differences. A piecewise-linear model (relu) has kinks
/// that a large step may cross, and f32 rounding spoils a small one, so a derivative
/// passes when the difference at some step agrees; a wrong gradient agrees at none.
const STEPS: [f32; 3] = [1e-2, 3e-3, 1e-3];

/// Finite differences of `loss` along `direction` in tensor `i`: for each step size the
/// central difference, then the forward and the backward one. Near a relu kink the
/// central difference straddles it; the one-sided difference on the kink-free side is
/// still the derivative.
fn finite_differences(
    reference: &Reference<'_>,
    params: &ParamSet,
    input: &Value,
    dropout: Option<DropoutRun>,
    i: usize,
    direction: &dyn Fn(usize) -> f32,
) -> Vec<f64> {
    let loss_at = |p: &ParamSet| f64::from(reference.loss_with(p, input, dropout).expect("loss"));
    let here = loss_at(params);
    STEPS
        .iter()
        .flat_map(|&eps| {
            let (mut plus, mut minus) = (params.clone(), params.clone());
            plus.data_mut(i).iter_mut().enumerate().for_each(|(j, p)| *p += eps * direction(j));
            minus.data_mut(i).iter_mut().enumerate().for_each(|(j, p)| *p -= eps * direction(j));
            let (up, down) = (loss_at(&plus), loss_at(&minus));
            let eps = f64::from(eps);
            [(up - down) / (2.0 * eps), (up - here) / eps, (here - down) / eps]
        })
        .collect()
}

/// Checks the gradient of every parameter tensor of `reference` against finite
/// differences of `loss`: one random unit direction per tensor, plus the coordinate with
/// the largest gradient and `coords` random coordinates. Panics naming the first failure.
pub fn grad_check(reference: &Reference<'_>, params: &ParamSet, input: &Value, seed: u64, coords: usize) {
    grad_check_with(reference, params, input, None, seed, coords)
}

/// [`grad_check`] with dropout's masks of `dropout` (the same masks for every evaluation of
/// the loss: the gradient given a mask).
pub fn grad_check_with(
    reference: &Reference<'_>,
    params: &ParamSet,
    input: &Value,
    dropout: Option<DropoutRun>,
    seed: u64,
    coords: usize,
) {
    let (loss, grads) = reference.loss_and_grads_with(params, input, dropout).expect("loss_and_grads");
    assert!(loss.is_finite(), "loss {loss}");
    assert_eq!(reference.loss_with(params, input, dropout).expect("loss"), loss, "loss and loss_and_grads agree");
    let mut rng = Rng::new(seed);
    let agrees = |analytic: f64, numeric: &[f64]| numeric.iter().any(|&n| close(analytic, n, 2e-4, 1e-2));
    let mut checked_nonzero = 0;
    for i in 0..params.len() {
        let name = params.spec(i).name.clone();
        let g = grads.data(i);
        // A random direction of unit norm within this tensor.
        let mut d = rng.vec(g.len());
        let norm = d.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        d.iter_mut().for_each(|v| *v /= norm);
        let analytic: f64 = g.iter().zip(&d).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
        let numeric = finite_differences(reference, params, input, dropout, i, &|j| d[j]);
        assert!(
            agrees(analytic, &numeric),
            "`{name}`: directional derivative {analytic} (analytic) vs {numeric:?} (central, forward, backward differences at steps {STEPS:?})"
        );
        if analytic.abs() > 1e-3 {
            checked_nonzero += 1;
        }
        // The largest coordinate and a few random ones.
        let largest = (0..g.len()).max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs())).unwrap_or(0);
        let mut picks = vec![largest];
        picks.extend((0..coords).map(|_| rng.below(g.len().max(1))));
        for &j in picks.iter().filter(|&&j| j < g.len()) {
            let numeric = finite_differences(reference, params, input, dropout, i, &|k| if k == j { 1.0 } else { 0.0 });
            let analytic = f64::from(g[j]);
            assert!(
                agrees(analytic, &numeric),
                "`{name}`[{j}]: derivative {analytic} (analytic) vs {numeric:?} (central, forward, backward differences at steps {STEPS:?})"
            );
        }
    }
    assert!(checked_nonzero > 0, "no parameter had a gradient: the check proves nothing");
}
