//! Helpers shared by the JIT tests.

use amp_jit::{Elementwise, Kernel, KernelCache, Pass, SpecBuilder, Width};
use std::sync::Arc;

thread_local! {
    static CACHE: std::cell::RefCell<KernelCache> = std::cell::RefCell::new(KernelCache::new().expect("a JIT for this machine"));
}

/// Compiles through a per-thread cache.
pub fn compile(spec: &amp_jit::KernelSpec) -> Arc<Kernel> {
    CACHE.with(|c| c.borrow_mut().kernel(spec).expect("the kernel compiles"))
}

fn single_op_spec(op: Elementwise, n: u64) -> amp_jit::KernelSpec {
    let mut b = SpecBuilder::new(n);
    let x = b.input(Width::Vector);
    let args = if op.arity() == 2 { vec![x, x] } else { vec![x] };
    let y = b.op(op, &args);
    b.output(y);
    b.finish().expect("a valid spec")
}

/// `y = op(x)` (or `op(x, x)`) over `n` elements.
pub fn single_op_kernel(op: Elementwise, n: u64) -> Arc<Kernel> {
    compile(&single_op_spec(op, n))
}

/// The same, compiled by a given cache.
pub fn single_op_kernel_in(cache: &mut KernelCache, op: Elementwise, n: u64) -> Arc<Kernel> {
    cache.kernel(&single_op_spec(op, n)).expect("the kernel compiles")
}

/// The output lengths of a call.
pub fn output_lens(kernel: &Kernel, pass: Pass, rows: usize) -> Vec<usize> {
    let spec = kernel.spec();
    let widths: Vec<Width> = match pass {
        Pass::Forward => spec.output_widths().collect(),
        Pass::Backward => spec.inputs().to_vec(),
    };
    widths.iter().map(|&w| spec.buffer_len(w, rows).expect("small")).collect()
}

/// Runs the JIT and returns the outputs.
pub fn run_kernel(kernel: &Kernel, pass: Pass, rows: usize, inputs: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let mut outputs: Vec<Vec<f32>> =
        output_lens(kernel, pass, rows).into_iter().map(|len| vec![f32::NAN; len]).collect();
    let ins: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [f32]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
    kernel.run(pass, rows, &ins, &mut outs).expect("the call is well formed");
    outputs
}

/// Runs the interpreter and returns the outputs.
pub fn run_interpreted(kernel: &Kernel, pass: Pass, rows: usize, inputs: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let mut outputs: Vec<Vec<f32>> =
        output_lens(kernel, pass, rows).into_iter().map(|len| vec![f32::NAN; len]).collect();
    let ins: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [f32]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
    kernel.run_interpreted(pass, rows, &ins, &mut outs).expect("the call is well formed");
    outputs
}

/// An interpreter value with a bound on how far the JIT's value of the same expression may
/// be from it, derived from the documented approximation errors: the f32 interpreter's
/// value `v` (computed exactly as `f32`'s `Arith`), and `e`, a bound on `|jit - v|`.
/// `e == 0` means the JIT must give the same value (same IEEE operations on the same
/// inputs, or a special value both define: NaN, ±inf); `e == inf` means no bound (the
/// value is not checked).
#[derive(Clone, Copy, Debug)]
pub struct Tracked {
    pub v: f32,
    pub e: f64,
}

/// f32's unit roundoff.
const U: f64 = 5.960_464_477_539_063e-8;
/// Relative error of Rust's (libm's) f32 functions, ≤ 3 ulp for all of them (sigmoid:
/// exp, an add and a division).
const STD_REL: f64 = 3.6e-7;
/// Absolute slack where results are subnormal.
const SUBNORMAL: f64 = 1e-38;
const SMALLEST: f64 = 1.401_298_464_324_817e-45;

impl Tracked {
    pub fn exact(v: f32) -> Tracked {
        Tracked { v, e: 0.0 }
    }

    fn unbounded(v: f32) -> Tracked {
        Tracked { v, e: f64::INFINITY }
    }

    /// The result of an IEEE operation whose inputs differ by at most `propagated`.
    fn rounded(v: f32, inputs_exact: bool, propagated: f64) -> Tracked {
        if inputs_exact {
            return Tracked::exact(v);
        }
        if !v.is_finite() || !propagated.is_finite() {
            return Tracked::unbounded(v);
        }
        let e = propagated + 2.0 * U * (f64::from(v).abs() + propagated) + SMALLEST;
        Tracked::bounded(v, e)
    }

    /// `v` within `e`, unbounded when the JIT's value could overflow or `e` is not finite.
    fn bounded(v: f32, e: f64) -> Tracked {
        if !e.is_finite() || f64::from(v).abs() + e >= f64::from(f32::MAX) {
            Tracked::unbounded(v)
        } else {
            Tracked { v, e }
        }
    }

    /// An approximated function with documented relative error `rel`, Lipschitz-like
    /// propagation `sensitivity` (the bound on `|f(x') - f(x)|` for `|x' - x| ≤ self.e`).
    fn approximated(self, v: f32, rel: f64, sensitivity: f64) -> Tracked {
        if self.e == 0.0 && !v.is_finite() {
            return Tracked::exact(v); // NaN → NaN, overflow → inf, log(0) = -inf: defined
        }
        if !v.is_finite() || self.e.is_infinite() {
            return Tracked::unbounded(v);
        }
        let magnitude = f64::from(v).abs() + sensitivity;
        Tracked::bounded(v, sensitivity + magnitude * (rel + STD_REL) + SUBNORMAL)
    }
}

impl amp_jit::Arith for Tracked {
    fn from_f32(x: f32) -> Self {
        Tracked::exact(x)
    }
    fn add(self, o: Self) -> Self {
        Tracked::rounded(self.v + o.v, self.e == 0.0 && o.e == 0.0, self.e + o.e)
    }
    fn sub(self, o: Self) -> Self {
        Tracked::rounded(self.v - o.v, self.e == 0.0 && o.e == 0.0, self.e + o.e)
    }
    fn mul(self, o: Self) -> Self {
        let (a, b) = (f64::from(self.v).abs(), f64::from(o.v).abs());
        Tracked::rounded(self.v * o.v, self.e == 0.0 && o.e == 0.0, a * o.e + b * self.e + self.e * o.e)
    }
    fn div(self, o: Self) -> Self {
        let v = self.v / o.v;
        let b = f64::from(o.v).abs();
        if !(self.e == 0.0 && o.e == 0.0) && o.e >= b {
            return Tracked::unbounded(v);
        }
        let propagated = (self.e + f64::from(v).abs() * o.e) / (b - o.e);
        Tracked::rounded(v, self.e == 0.0 && o.e == 0.0, propagated)
    }
    fn neg(self) -> Self {
        Tracked { v: -self.v, e: self.e }
    }
    fn relu(self) -> Self {
        Tracked { v: self.v.relu(), e: self.e }
    }
    fn relu_grad(self, g: Self) -> Self {
        let v = self.v.relu_grad(g.v);
        let x = f64::from(self.v);
        if self.e == 0.0 || x - self.e > 0.0 {
            Tracked { v, e: if self.v <= 0.0 { 0.0 } else { g.e } }
        } else if x + self.e <= 0.0 {
            Tracked::exact(0.0)
        } else {
            Tracked::bounded(v, f64::from(g.v).abs() + g.e)
        }
    }
    fn exp(self) -> Self {
        let v = self.v.exp();
        let sensitivity = f64::from(v).abs() * self.e.exp_m1();
        self.approximated(v, amp_jit::max_rel_error::EXP, sensitivity)
    }
    fn log(self) -> Self {
        let v = self.v.ln();
        let x = f64::from(self.v);
        if self.e > 0.0 && (x - self.e).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return Tracked::unbounded(v);
        }
        let sensitivity = -(-self.e / x).ln_1p();
        self.approximated(v, amp_jit::max_rel_error::LOG, sensitivity)
    }
    fn tanh(self) -> Self {
        self.approximated(self.v.tanh(), amp_jit::max_rel_error::TANH, self.e.min(2.0))
    }
    fn sigmoid(self) -> Self {
        self.approximated(self.v.sigmoid(), amp_jit::max_rel_error::SIGMOID, (self.e / 4.0).min(1.0))
    }
    fn sum(terms: &[Self]) -> Self {
        let v = terms.iter().fold(0.0f32, |acc, t| acc + t.v);
        let all_exact = terms.iter().all(|t| t.e == 0.0);
        let finite_mass: f64 = terms.iter().filter(|t| t.v.is_finite()).map(|t| f64::from(t.v).abs()).sum();
        if !v.is_finite() {
            // inf or NaN whatever the order, unless finite terms could overflow.
            let defined = all_exact && finite_mass < 1e37 && terms.iter().any(|t| !t.v.is_finite());
            return if defined { Tracked::exact(v) } else { Tracked::unbounded(v) };
        }
        let e_sum: f64 = terms.iter().map(|t| t.e).sum();
        // Any two summation orders differ by at most 2·(len-1)·u·Σ|t| (plus the inputs').
        let order = 2.0 * terms.len() as f64 * U * finite_mass;
        Tracked::bounded(v, e_sum + order + SMALLEST * terms.len() as f64)
    }
}

/// How a JIT value compared with its tracked interpreter value.
#[derive(Clone, Copy, Debug, Default)]
pub struct Agreement {
    pub checked: usize,
    pub skipped: usize,
}

/// Checks every JIT value against its bound; `Err` names the first disagreement.
pub fn agree(what: &str, jit: &[f32], tracked: &[Tracked], tally: &mut Agreement) -> Result<(), String> {
    for (i, (&j, t)) in jit.iter().zip(tracked).enumerate() {
        let ok = if t.e.is_infinite() || t.e.is_nan() {
            tally.skipped += 1;
            continue;
        } else if t.e == 0.0 {
            (j.is_nan() && t.v.is_nan()) || j == t.v
        } else {
            j.is_finite() && (f64::from(j) - f64::from(t.v)).abs() <= 1.5 * t.e
        };
        tally.checked += 1;
        if !ok {
            return Err(format!("{what}[{i}]: JIT {j:e}, interpreter {:e} ± {:e}", t.v, t.e));
        }
    }
    Ok(())
}

/// Runs both pass functions of a kernel on the JIT and on the tracked interpreter and
/// checks every output; `grads` are the output gradients.
pub fn differential(
    kernel: &Kernel,
    rows: usize,
    inputs: &[Vec<f32>],
    grads: &[Vec<f32>],
) -> Result<Agreement, String> {
    let mut tally = Agreement::default();
    let spec = kernel.spec();
    for pass in [Pass::Forward, Pass::Backward] {
        let mut all_inputs: Vec<Vec<f32>> = inputs.to_vec();
        if pass == Pass::Backward {
            all_inputs.extend(grads.iter().cloned());
        }
        let jit = run_kernel(kernel, pass, rows, &all_inputs);
        let tracked_in: Vec<Vec<Tracked>> =
            all_inputs.iter().map(|b| b.iter().map(|&x| Tracked::exact(x)).collect()).collect();
        let mut tracked_out: Vec<Vec<Tracked>> =
            output_lens(kernel, pass, rows).into_iter().map(|len| vec![Tracked::exact(0.0); len]).collect();
        {
            let ins: Vec<&[Tracked]> = tracked_in.iter().map(Vec::as_slice).collect();
            let mut outs: Vec<&mut [Tracked]> = tracked_out.iter_mut().map(Vec::as_mut_slice).collect();
            amp_jit::interpret(spec, pass, rows, &ins, &mut outs).map_err(|e| e.to_string())?;
        }
        // The tracked values are the f32 interpreter's, bit for bit.
        let plain = run_interpreted(kernel, pass, rows, &all_inputs);
        for (p, t) in plain.iter().flatten().zip(tracked_out.iter().flatten()) {
            assert!(p.to_bits() == t.v.to_bits() || (p.is_nan() && t.v.is_nan()));
        }
        for (port, (j, t)) in jit.iter().zip(&tracked_out).enumerate() {
            agree(&format!("{pass:?} output {port}"), j, t, &mut tally)?;
        }
    }
    Ok(tally)
}

/// A small deterministic generator (xorshift*), so that a proptest seed names a data set.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * unit
    }

    /// Mostly uniform in [-3, 3]; with probability `edge`, one of the edge values.
    pub fn value(&mut self, edge: f64) -> f32 {
        const EDGES: [f32; 10] =
            [0.0, -0.0, 80.0, -80.0, 1e30, -1e30, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40];
        if (self.next_u64() % 1_000_000) as f64 / 1e6 < edge {
            EDGES[(self.next_u64() % EDGES.len() as u64) as usize]
        } else {
            self.uniform(-3.0, 3.0)
        }
    }
}

/// Random buffers for a kernel call: inputs and output gradients.
pub fn random_call(kernel: &Kernel, rows: usize, seed: u64, edge: f64) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let spec = kernel.spec();
    let mut rng = Rng::new(seed);
    let mut buffer = |w: Width, edge: f64| -> Vec<f32> {
        (0..spec.buffer_len(w, rows).expect("small")).map(|_| rng.value(edge)).collect()
    };
    let inputs = spec.inputs().iter().map(|&w| buffer(w, edge)).collect();
    let grads = spec.output_widths().collect::<Vec<_>>().into_iter().map(|w| buffer(w, edge / 4.0)).collect();
    (inputs, grads)
}

/// Compiles an example model with `-D` overrides, lowered, optimised and verified.
pub fn compile_example(file: &str, defines: &[(&str, i64)]) -> amp_ir::verify::Verified {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file);
    let text = std::fs::read_to_string(&path).expect("the example exists");
    let mut map = amp_diagnostics::SourceMap::new();
    let main = map.add(path.display().to_string(), text);
    let options = amp_sema::Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let checked = amp_sema::check_program(&mut map, main, &options, &amp_sema::NoFiles);
    assert!(!checked.has_errors(), "{file} checks");
    let model = checked.program.models[0];
    match amp_lower::compile_model(&checked.program, &map, model) {
        Ok((graph, _)) => graph,
        Err(_) => panic!("{file} compiles"),
    }
}

/// The five examples with small hyperparameters (and the two with fusion groups at their
/// real sizes).
pub fn examples() -> Vec<(&'static str, amp_ir::verify::Verified)> {
    let small: [(&str, &[(&str, i64)]); 7] = [
        ("tree_lstm.amp", &[("vocab", 20), ("embed", 8), ("hidden", 6), ("classes", 3)]),
        ("ggsnn.amp", &[("kinds", 3), ("hidden", 5), ("steps", 2)]),
        ("list_reduce.amp", &[("hidden", 7)]),
        ("mlp.amp", &[("hidden", 9)]),
        ("moe.amp", &[("experts", 4)]),
        ("tree_lstm.amp", &[]),
        ("ggsnn.amp", &[]),
    ];
    small.iter().map(|(file, defines)| (*file, compile_example(file, defines))).collect()
}
