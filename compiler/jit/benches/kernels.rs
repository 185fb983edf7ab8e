//! Fused elementwise kernels: the JIT against the same chain op by op (the interpreter,
//! one new buffer per op as an op-by-op executor allocates) and against a plain Rust
//! fused loop (one pass, `f32::exp`/`tanh`, as LLVM compiles it), measured in one run.
//!
//! `cargo bench -p amp-jit --bench kernels` (add `-- --quick` for fewer samples). Prints,
//! per gate chain (LSTM, GRU as in `ggsnn.amp`, Tree-LSTM as in `tree_lstm.amp`), per
//! width `n` and rows per call (1: one message; 32: a batch of messages), the median
//! time per call, elements per second, and the ratios.

use amp_ir::{BinaryFn, UnaryFn};
use amp_jit::{Elementwise, Kernel, KernelCache, KernelSpec, Pass, SpecBuilder, ValueId, Width};
use std::hint::black_box;
use std::time::{Duration, Instant};

type PlainForward = fn(n: usize, rows: usize, inputs: &[&[f32]], outputs: &mut [&mut [f32]]);

struct Chain {
    name: &'static str,
    /// The example file whose fusion group this chain is, when there is one.
    example: Option<(&'static str, usize)>,
    build: fn(u64) -> KernelSpec,
    plain: PlainForward,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn vector_inputs(b: &mut SpecBuilder, count: usize) -> Vec<ValueId> {
    (0..count).map(|_| b.input(Width::Vector)).collect()
}

/// LSTM: gates i, f, g, o (pre-activations) and c_prev → c, h.
fn lstm(n: u64) -> KernelSpec {
    let mut b = SpecBuilder::new(n);
    let v = vector_inputs(&mut b, 5);
    let i = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[0]]);
    let f = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[1]]);
    let g = b.op(Elementwise::Unary(UnaryFn::Tanh), &[v[2]]);
    let o = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[3]]);
    let fc = b.op(Elementwise::Binary(BinaryFn::Mul), &[f, v[4]]);
    let ig = b.op(Elementwise::Binary(BinaryFn::Mul), &[i, g]);
    let c = b.op(Elementwise::Binary(BinaryFn::Add), &[fc, ig]);
    let tc = b.op(Elementwise::Unary(UnaryFn::Tanh), &[c]);
    let h = b.op(Elementwise::Binary(BinaryFn::Mul), &[o, tc]);
    b.output(c);
    b.output(h);
    b.finish().expect("valid")
}

fn lstm_plain(n: usize, rows: usize, x: &[&[f32]], out: &mut [&mut [f32]]) {
    let (c_out, rest) = out.split_at_mut(1);
    let (c_out, h_out) = (&mut *c_out[0], &mut *rest[0]);
    for e in 0..n * rows {
        let c = sigmoid(x[1][e]) * x[4][e] + sigmoid(x[0][e]) * x[2][e].tanh();
        c_out[e] = c;
        h_out[e] = sigmoid(x[3][e]) * c.tanh();
    }
}

/// The GRU update of `ggsnn.amp`'s fusion group (`1 - z` with a broadcast scalar 1).
fn gru(n: u64) -> KernelSpec {
    let mut b = SpecBuilder::new(n);
    let v = vector_inputs(&mut b, 6);
    let one = b.input(Width::Scalar);
    let h_prev = b.input(Width::Vector);
    let a = b.op(Elementwise::Binary(BinaryFn::Add), &[v[0], v[1]]);
    let r = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[a]);
    let a = b.op(Elementwise::Binary(BinaryFn::Add), &[v[2], v[3]]);
    let z = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[a]);
    let rh = b.op(Elementwise::Binary(BinaryFn::Mul), &[r, v[4]]);
    let a = b.op(Elementwise::Binary(BinaryFn::Add), &[v[5], rh]);
    let cand = b.op(Elementwise::Unary(UnaryFn::Tanh), &[a]);
    let keep = b.op(Elementwise::Binary(BinaryFn::Sub), &[one, z]);
    let new = b.op(Elementwise::Binary(BinaryFn::Mul), &[keep, cand]);
    let old = b.op(Elementwise::Binary(BinaryFn::Mul), &[z, h_prev]);
    let h = b.op(Elementwise::Binary(BinaryFn::Add), &[new, old]);
    b.output(h);
    b.finish().expect("valid")
}

fn gru_plain(n: usize, rows: usize, x: &[&[f32]], out: &mut [&mut [f32]]) {
    for row in 0..rows {
        let one = x[6][row];
        for e in row * n..(row + 1) * n {
            let r = sigmoid(x[0][e] + x[1][e]);
            let z = sigmoid(x[2][e] + x[3][e]);
            let cand = (x[5][e] + r * x[4][e]).tanh();
            out[0][e] = (one - z) * cand + z * x[7][e];
        }
    }
}

/// The branch cell of `tree_lstm.amp`: gates i, u, f_l, c_l, f_r, c_r, o → c, h.
fn tree_lstm(n: u64) -> KernelSpec {
    let mut b = SpecBuilder::new(n);
    let v = vector_inputs(&mut b, 7);
    let i = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[0]]);
    let u = b.op(Elementwise::Unary(UnaryFn::Tanh), &[v[1]]);
    let iu = b.op(Elementwise::Binary(BinaryFn::Mul), &[i, u]);
    let fl = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[2]]);
    let lc = b.op(Elementwise::Binary(BinaryFn::Mul), &[fl, v[3]]);
    let c = b.op(Elementwise::Binary(BinaryFn::Add), &[iu, lc]);
    let fr = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[4]]);
    let rc = b.op(Elementwise::Binary(BinaryFn::Mul), &[fr, v[5]]);
    let c = b.op(Elementwise::Binary(BinaryFn::Add), &[c, rc]);
    let o = b.op(Elementwise::Unary(UnaryFn::Sigmoid), &[v[6]]);
    let tc = b.op(Elementwise::Unary(UnaryFn::Tanh), &[c]);
    let h = b.op(Elementwise::Binary(BinaryFn::Mul), &[o, tc]);
    b.output(c);
    b.output(h);
    b.finish().expect("valid")
}

fn tree_lstm_plain(n: usize, rows: usize, x: &[&[f32]], out: &mut [&mut [f32]]) {
    let (c_out, rest) = out.split_at_mut(1);
    let (c_out, h_out) = (&mut *c_out[0], &mut *rest[0]);
    for e in 0..n * rows {
        let c = sigmoid(x[0][e]) * x[1][e].tanh() + sigmoid(x[2][e]) * x[3][e] + sigmoid(x[4][e]) * x[5][e];
        c_out[e] = c;
        h_out[e] = sigmoid(x[6][e]) * c.tanh();
    }
}

/// The median time per call of `f`, over `samples` samples of enough calls for ~2 ms.
fn median_time(samples: usize, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    let mut calibration = 0u32;
    while start.elapsed() < Duration::from_millis(2) || calibration < 3 {
        f();
        calibration += 1;
    }
    let calls = calibration.max(1);
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed() / calls
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

struct Buffers {
    inputs: Vec<Vec<f32>>,
    outputs: Vec<Vec<f32>>,
}

impl Buffers {
    fn new(kernel: &Kernel, pass: Pass, rows: usize) -> Buffers {
        let spec = kernel.spec();
        let len = |w: Width| spec.buffer_len(w, rows).expect("small");
        let mut seed = 0x2545_f491u32;
        let mut value = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed % 4000) as f32 / 1000.0 - 2.0
        };
        let mut in_widths: Vec<Width> = spec.inputs().to_vec();
        let out_widths: Vec<Width> = match pass {
            Pass::Forward => spec.output_widths().collect(),
            Pass::Backward => {
                in_widths.extend(spec.output_widths());
                spec.inputs().to_vec()
            }
        };
        let inputs = in_widths.iter().map(|&w| (0..len(w)).map(|_| value()).collect()).collect();
        let outputs = out_widths.iter().map(|&w| vec![0.0; len(w)]).collect();
        Buffers { inputs, outputs }
    }

    /// The median time per call of `f` on these buffers (the slice lists are built once,
    /// outside the timing, as an executor would keep them).
    fn time(&mut self, samples: usize, mut f: impl FnMut(&[&[f32]], &mut [&mut [f32]])) -> Duration {
        let ins: Vec<&[f32]> = self.inputs.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [f32]> = self.outputs.iter_mut().map(Vec::as_mut_slice).collect();
        median_time(samples, || f(black_box(&ins), black_box(&mut outs)))
    }
}

fn example_spec(file: &str, group: usize, n: usize) -> Option<KernelSpec> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file);
    let text = std::fs::read_to_string(&path).ok()?;
    let mut map = amp_diagnostics::SourceMap::new();
    let main = map.add(path.display().to_string(), text);
    let options = amp_sema::Options { defines: vec![("hidden".to_string(), n as i64)] };
    let checked = amp_sema::check_program(&mut map, main, &options, &amp_sema::NoFiles);
    let (graph, _) = amp_lower::compile_model(&checked.program, &map, *checked.program.models.first()?).ok()?;
    amp_jit::fusion_groups(&graph).into_iter().nth(group)?.ok().map(|g| g.spec)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let samples = if quick { 5 } else { 21 };
    let chains = [
        Chain { name: "LSTM", example: None, build: lstm, plain: lstm_plain },
        Chain { name: "GRU", example: Some(("ggsnn.amp", 0)), build: gru, plain: gru_plain },
        Chain { name: "Tree-LSTM", example: Some(("tree_lstm.amp", 1)), build: tree_lstm, plain: tree_lstm_plain },
    ];
    let cache = KernelCache::new().expect("a JIT for this machine");
    println!("fused elementwise gate chains; median of {samples} samples; fma: {}", cache.uses_fma());
    println!(
        "{:<10} {:>4} {:>5} {:>4} | {:>9} {:>9} {:>9} | {:>10} {:>10} {:>10} | {:>8} {:>8}",
        "chain",
        "n",
        "rows",
        "pass",
        "jit µs",
        "op-op µs",
        "plain µs",
        "jit Mel/s",
        "op Mel/s",
        "plain Mel/s",
        "op/jit",
        "plain/jit"
    );
    let mut worst_forward = f64::INFINITY;
    let mut compile_times = Vec::new();
    for chain in &chains {
        for n in [150usize, 256] {
            let spec = (chain.build)(n as u64);
            if let Some((file, group)) = chain.example {
                let from_example = example_spec(file, group, n).expect("the example compiles");
                assert_eq!(from_example, spec, "{} must be {file}'s fusion group", chain.name);
            }
            let start = Instant::now();
            let mut fresh = KernelCache::new().expect("a JIT");
            let kernel = fresh.kernel(&spec).expect("compiles");
            compile_times.push((chain.name, n, start.elapsed()));
            for rows in [1usize, 32] {
                for pass in [Pass::Forward, Pass::Backward] {
                    let mut buffers = Buffers::new(&kernel, pass, rows);
                    let jit = buffers.time(samples, |i, o| kernel.run(pass, rows, i, o).expect("runs"));
                    let op_by_op =
                        buffers.time(samples, |i, o| kernel.run_interpreted(pass, rows, i, o).expect("runs"));
                    let plain =
                        (pass == Pass::Forward).then(|| buffers.time(samples, |i, o| (chain.plain)(n, rows, i, o)));
                    let elements = (n * rows) as f64;
                    let rate = |t: Duration| elements / t.as_secs_f64() / 1e6;
                    let us = |t: Duration| t.as_secs_f64() * 1e6;
                    let speedup = op_by_op.as_secs_f64() / jit.as_secs_f64();
                    if pass == Pass::Forward {
                        worst_forward = worst_forward.min(speedup);
                    }
                    println!(
                        "{:<10} {:>4} {:>5} {:>4} | {:>9.2} {:>9.2} {:>9} | {:>10.0} {:>10.0} {:>11} | {:>7.1}× {:>8}",
                        chain.name,
                        n,
                        rows,
                        if pass == Pass::Forward { "fwd" } else { "bwd" },
                        us(jit),
                        us(op_by_op),
                        plain.map_or("–".to_string(), |t| format!("{:.2}", us(t))),
                        rate(jit),
                        rate(op_by_op),
                        plain.map_or("–".to_string(), |t| format!("{:.0}", rate(t))),
                        speedup,
                        plain.map_or("–".to_string(), |t| format!("{:.1}×", t.as_secs_f64() / jit.as_secs_f64())),
                    );
                }
            }
        }
    }
    println!("smallest forward speed-up of the JIT over op by op: {worst_forward:.1}× (target ≥ 3×)");
    for (name, n, t) in compile_times {
        println!(
            "compile {name} n={n} (new cache, forward + backward, plain and saving): {:.2} ms",
            t.as_secs_f64() * 1e3
        );
    }
}
