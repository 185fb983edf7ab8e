//! f32 GEMM crates on the three products of a Linear layer, at the canonical models'
//! shapes: which crate the executor's kernels use, chosen by measurement.
//!
//! For `x: [m, in]`, `W: [out, in]` (row-major, as the executor stores them) it times
//! - forward `y = x Wᵀ + b`,
//! - input gradient `dx = dy W`,
//! - weight gradient `dW += dyᵀ x`,
//!
//! each with: the hand-written loops the executor used before (`hand`, the baseline, run
//! in the same process), `matrixmultiply` 0.3, `gemm` 0.19 with its `x86-v4` (AVX-512)
//! kernels, for the forward also `gemm` on a kept `Wᵀ` (`[in, out]`: the crate packs a
//! transposed view of `W` anew at every call, which dominates at few rows), and the
//! executor's own kernels (`amp kernels`, `amp_exec::kernels`, as the Linear op runs
//! them: one row on `W`, several on copies of `Wᵀ` and `W` whose rows are padded to the
//! crate's SIMD panels, which it then uses in place instead of packing the whole weight
//! at every call; the rows taken out of the padded output are part of the time), and
//! `skinny on W` (`amp_exec::kernels::skinny`: a few rows on `W` read in place, what the
//! op does for a weight updated too often for a copy to pay, such as a MoE expert; here,
//! unlike there, `W` stays in cache between repetitions). Each cell is the median of many repetitions, printed
//! as GFLOP/s (2·m·in·out per product) and as a share of one core's f32 peak (171 GFLOP/s
//! measured with an FMA loop on the 2-core Xeon of docs/PERFORMANCE.md's machine note; pass another
//! with `AMP_PEAK_GFLOPS`). Then the executor's kernels over matrixmultiply and over the
//! hand loops (ratios in the same run), and the largest error of the hand loops and of
//! the executor's kernels against the exact (f64) product, relative to the magnitude of
//! each output's terms. A last table gives the cost of making the padded copies (after
//! an update), in µs and, for `Wᵀ`, in one-row forwards.
//!
//! Shapes: Tree-LSTM (branch 300→750, leaf 300→450, and 150→750), the MoE's experts
//! (256→256), list-reduce's cell (256→128) and 128→128, with `m` rows (messages batched
//! into one matrix) in {1, 2, 4, 8, 25 (branch only), 32, 64, 256} ({1, 8, 32, 64, 256}
//! for 128→128).
//!
//! A last table runs the products of a few rows on a MoE expert's weights from memory (a
//! pool of them cycled), where the executor's in-place kernels ask for the weight's rows
//! ahead of use.
//!
//! Run: `cargo bench -p amp-benches --bench gemm` (add `-- quick` for shorter medians,
//! `-- memory` for the table from memory alone). `-- shapes M,IN,OUT ...` times only the
//! executor's kernels at the shapes given, one line per product (`amp forward|input|weight
//! M IN OUT GFLOPS`), for `benches/pytorch/gemm.py`, which puts `torch.mm` beside them.
// Bench code: a failed unwrap is a failed run. It calls the gemm crate directly to compare
// it with the executor's kernels; each call states its SAFETY like runtime/exec's matmul.
#![allow(clippy::unwrap_used, unsafe_code)]

use amp_exec::kernels;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One core's f32 FMA peak on the reference machine (docs/PERFORMANCE.md), GFLOP/s.
const PEAK_GFLOPS: f64 = 171.0;

const ROWS: [usize; 8] = [1, 2, 4, 8, 25, 32, 64, 256];
/// `(in, out, what)`.
const LAYERS: [(usize, usize, &str); 5] = [
    (300, 750, "tree-lstm branch"),
    (300, 450, "tree-lstm leaf"),
    (150, 750, "h→5h, h=150"),
    (256, 256, "moe expert"),
    (256, 128, "list-reduce cell"),
];
/// 128→128 (list-reduce's width) at the brief's row counts.
const EXTRA: [(usize, usize, usize, &str); 5] = [
    (1, 128, 128, "128→128"),
    (8, 128, 128, "128→128"),
    (32, 128, 128, "128→128"),
    (64, 128, 128, "128→128"),
    (256, 128, 128, "128→128"),
];

/// `-- shapes M,IN,OUT ...`: the executor's kernels alone at each shape (see the module
/// doc), machine-readable. A shape that does not parse is a failed run.
fn shapes_only(budget: Duration, shapes: &[String]) {
    for shape in shapes.iter().filter(|s| s.contains(',')) {
        let dims: Vec<usize> = shape.split(',').map(|d| d.parse().unwrap()).collect();
        let [m, inp, out] = dims[..] else { panic!("a shape is M,IN,OUT, not {shape}") };
        let flops = 2.0 * (m * inp * out) as f64;
        for (product, name) in
            [(Product::Forward, "forward"), (Product::InputGrad, "input"), (Product::WeightGrad, "weight")]
        {
            let (_, kernel) = *kernels_of(product).last().unwrap();
            let mut operands = Operands::new(m, inp, out);
            let time = median(budget, || kernel(black_box(&mut operands)));
            println!("amp {name} {m} {inp} {out} {:.2}", flops / time.as_secs_f64() / 1e9);
        }
    }
}

/// The weights the table "from memory" cycles through: 512 of 256 → 256 (128 MiB, past
/// the caches of the reference machine), as a 64-expert MoE's weights come in training.
const POOL: usize = 512;
const POOL_ROWS: [usize; 5] = [1, 2, 4, 8, 16];

/// Median wall time of `f` over repetitions filling about `budget`.
fn median(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    f();
    let once = start.elapsed().max(Duration::from_nanos(50));
    // Batches of calls so that each timed sample is at least ~20 µs (timer resolution).
    let per_sample = (20_000 / once.as_nanos().max(1)).max(1) as usize;
    let samples = (budget.as_nanos() / (once.as_nanos() * per_sample as u128)).clamp(11, 2001) as usize;
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per_sample {
                f();
            }
            t.elapsed() / per_sample as u32
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Product {
    Forward,
    InputGrad,
    WeightGrad,
}

impl Product {
    fn name(self) -> &'static str {
        match self {
            Product::Forward => "y = x Wt + b",
            Product::InputGrad => "dx = dy W",
            Product::WeightGrad => "dW += dyt x",
        }
    }
}

/// The operands of one Linear at `m` rows.
struct Operands {
    m: usize,
    inp: usize,
    out: usize,
    x: Vec<f32>,
    w: Vec<f32>,
    /// `W^T` (`[in, out]`), dense.
    wt: Vec<f32>,
    /// What the executor keeps for the products of several rows: `W^T` with rows padded
    /// to `ld_out` and `W` with rows padded to `ld_in` (`amp_exec::kernels::PANEL`), and the
    /// padded outputs the GEMM writes before the rows are taken apart.
    amp_wt: Vec<f32>,
    amp_w: Vec<f32>,
    ld_out: usize,
    ld_in: usize,
    y_padded: Vec<f32>,
    dx_padded: Vec<f32>,
    b: Vec<f32>,
    dy: Vec<f32>,
    y: Vec<f32>,
    dx: Vec<f32>,
    dw: Vec<f32>,
}

impl Operands {
    fn new(m: usize, inp: usize, out: usize) -> Operands {
        let w = values(out * inp, 2);
        let wt = (0..inp * out).map(|j| w[(j % out) * inp + j / out]).collect();
        let (mut amp_wt, mut amp_w) = (Vec::new(), Vec::new());
        let ld_out = amp_exec::kernels::transpose(&w, out, inp, &mut amp_wt);
        let ld_in = amp_exec::kernels::pad_rows(&w, out, inp, &mut amp_w);
        Operands {
            m,
            inp,
            out,
            x: values(m * inp, 1),
            w,
            wt,
            amp_wt,
            amp_w,
            ld_out,
            ld_in,
            y_padded: vec![0.0; m * ld_out],
            dx_padded: vec![0.0; m * ld_in],
            b: values(out, 3),
            dy: values(m * out, 4),
            y: vec![0.0; m * out],
            dx: vec![0.0; m * inp],
            dw: vec![0.0; out * inp],
        }
    }
}

/// Copies the first `width` values of each row of `padded` (rows `stride` apart) into
/// `dense`, as the Linear op hands each message its rows.
fn unpad(padded: &[f32], stride: usize, dense: &mut [f32], width: usize) {
    for (to, from) in dense.chunks_exact_mut(width).zip(padded.chunks_exact(stride)) {
        to.copy_from_slice(&from[..width]);
    }
}

/// The executor's loops before the GEMM crate (`kernels.rs` at that time), split into the
/// three products.
mod hand {
    // The dot product and axpy are still the executor's (`amp_exec::kernels`).
    use amp_exec::kernels::{axpy, dot};

    pub fn forward(x: &[f32], w: &[f32], b: &[f32], y: &mut [f32], inp: usize, out: usize) {
        for (xr, yr) in x.chunks_exact(inp).zip(y.chunks_exact_mut(out)) {
            for (o, yo) in yr.iter_mut().enumerate() {
                *yo = b[o] + dot(&w[o * inp..(o + 1) * inp], xr);
            }
        }
    }

    pub fn input_grad(dy: &[f32], w: &[f32], dx: &mut [f32], inp: usize, out: usize) {
        dx.iter_mut().for_each(|v| *v = 0.0);
        for (dyr, dxr) in dy.chunks_exact(out).zip(dx.chunks_exact_mut(inp)) {
            for (o, &g) in dyr.iter().enumerate() {
                axpy(g, &w[o * inp..(o + 1) * inp], dxr);
            }
        }
    }

    pub fn weight_grad(dy: &[f32], x: &[f32], dw: &mut [f32], inp: usize, out: usize) {
        for (dyr, xr) in dy.chunks_exact(out).zip(x.chunks_exact(inp)) {
            for (o, &g) in dyr.iter().enumerate() {
                axpy(g, xr, &mut dw[o * inp..(o + 1) * inp]);
            }
        }
    }
}

/// The three products through `matrixmultiply::sgemm` (C ← α A B + β C, strides in
/// elements).
mod mm {
    use super::Operands;

    pub fn forward(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        for row in o.y.chunks_exact_mut(out) {
            row.copy_from_slice(&o.b);
        }
        // SAFETY: x is m×in (row stride in), Wᵀ is in×out read from W with row stride 1 and
        // column stride in, y is m×out; all three slices have exactly those lengths.
        unsafe {
            matrixmultiply::sgemm(
                m,
                inp,
                out,
                1.0,
                o.x.as_ptr(),
                inp as isize,
                1,
                o.w.as_ptr(),
                1,
                inp as isize,
                1.0,
                o.y.as_mut_ptr(),
                out as isize,
                1,
            );
        }
    }

    pub fn input_grad(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        // SAFETY: dy is m×out, W out×in, dx m×in, row-major, of exactly those lengths.
        unsafe {
            matrixmultiply::sgemm(
                m,
                out,
                inp,
                1.0,
                o.dy.as_ptr(),
                out as isize,
                1,
                o.w.as_ptr(),
                inp as isize,
                1,
                0.0,
                o.dx.as_mut_ptr(),
                inp as isize,
                1,
            );
        }
    }

    pub fn weight_grad(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        // SAFETY: dyᵀ is out×m read from dy (m×out) with row stride 1 and column stride
        // out, x is m×in, dW out×in; all of exactly those lengths.
        unsafe {
            matrixmultiply::sgemm(
                out,
                m,
                inp,
                1.0,
                o.dy.as_ptr(),
                1,
                out as isize,
                o.x.as_ptr(),
                inp as isize,
                1,
                1.0,
                o.dw.as_mut_ptr(),
                inp as isize,
                1,
            );
        }
    }
}

/// The three products through `gemm::gemm` (dst ← α dst + β lhs rhs, column stride
/// before row stride).
mod gemm_crate {
    use super::Operands;
    use gemm::{gemm, Parallelism};

    pub fn forward(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        for row in o.y.chunks_exact_mut(out) {
            row.copy_from_slice(&o.b);
        }
        // SAFETY: as in `mm::forward`.
        unsafe {
            gemm(
                m,
                out,
                inp,
                o.y.as_mut_ptr(),
                1,
                out as isize,
                true,
                o.x.as_ptr(),
                1,
                inp as isize,
                o.w.as_ptr(),
                inp as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    }

    /// The forward on a kept `W^T`: `rhs` row-major, which the crate packs cheaply.
    pub fn forward_wt(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        for row in o.y.chunks_exact_mut(out) {
            row.copy_from_slice(&o.b);
        }
        // SAFETY: x is m×in, wt in×out, y m×out, row-major, of exactly those lengths.
        unsafe {
            gemm(
                m,
                out,
                inp,
                o.y.as_mut_ptr(),
                1,
                out as isize,
                true,
                o.x.as_ptr(),
                1,
                inp as isize,
                o.wt.as_ptr(),
                1,
                out as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    }

    pub fn input_grad(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        // SAFETY: as in `mm::input_grad`.
        unsafe {
            gemm(
                m,
                inp,
                out,
                o.dx.as_mut_ptr(),
                1,
                inp as isize,
                false,
                o.dy.as_ptr(),
                1,
                out as isize,
                o.w.as_ptr(),
                1,
                inp as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    }

    pub fn weight_grad(o: &mut Operands) {
        let (m, inp, out) = (o.m, o.inp, o.out);
        // SAFETY: as in `mm::weight_grad`.
        unsafe {
            gemm(
                out,
                inp,
                m,
                o.dw.as_mut_ptr(),
                1,
                inp as isize,
                true,
                o.dy.as_ptr(),
                out as isize,
                1,
                o.x.as_ptr(),
                1,
                inp as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    }
}

/// The executor's kernels (through the chosen crate, with their checks and bias).
mod amp {
    use super::Operands;
    use amp_exec::kernels;

    /// What the Linear op does with its kept copies: one row on `W` itself, several on
    /// the padded `W^T`, then the rows taken out of the padded output.
    pub fn forward(o: &mut Operands) {
        if o.m < 2 {
            kernels::linear_forward_into(&o.x, &o.w, &o.b, &mut o.y, o.inp, o.out);
        } else {
            kernels::linear_forward_t_into(&o.x, &o.amp_wt, &o.b, &mut o.y_padded, o.inp, o.ld_out);
            super::unpad(&o.y_padded, o.ld_out, &mut o.y, o.out);
        }
    }

    /// On the padded `W` (when `in` needs padding), then the rows taken out; into a new
    /// buffer, as the op's.
    pub fn input_grad(o: &mut Operands) {
        if o.ld_in == o.inp {
            o.dx = kernels::linear_input_grad(&o.dy, &o.w, o.inp, o.out);
        } else {
            o.dx_padded = kernels::linear_input_grad(&o.dy, &o.amp_w, o.ld_in, o.out);
            super::unpad(&o.dx_padded, o.ld_in, &mut o.dx, o.inp);
        }
    }

    pub fn weight_grad(o: &mut Operands) {
        kernels::linear_weight_grad(&o.dy, &o.x, &mut o.dw, o.inp, o.out);
    }
}

type Kernel = fn(&mut Operands);

fn kernels_of(product: Product) -> Vec<(&'static str, Kernel)> {
    match product {
        Product::Forward => vec![
            ("hand", |o| hand::forward(&o.x, &o.w, &o.b, &mut o.y, o.inp, o.out)),
            ("matrixmultiply", mm::forward),
            ("gemm", gemm_crate::forward),
            ("gemm on Wt", gemm_crate::forward_wt),
            ("skinny on W", |o| kernels::linear_forward_rows_into(&o.x, &o.w, &o.b, &mut o.y, o.inp, o.out)),
            ("amp kernels", amp::forward),
        ],
        Product::InputGrad => vec![
            ("hand", |o| hand::input_grad(&o.dy, &o.w, &mut o.dx, o.inp, o.out)),
            ("matrixmultiply", mm::input_grad),
            ("gemm", gemm_crate::input_grad),
            ("skinny on W", |o| {
                o.dx.fill(0.0);
                kernels::rows_times_w(&o.dy, &o.w, &mut o.dx, o.inp, o.out);
            }),
            ("amp kernels", amp::input_grad),
        ],
        Product::WeightGrad => vec![
            ("hand", |o| hand::weight_grad(&o.dy, &o.x, &mut o.dw, o.inp, o.out)),
            ("matrixmultiply", mm::weight_grad),
            ("gemm", gemm_crate::weight_grad),
            ("amp kernels", amp::weight_grad),
        ],
    }
}

/// The output a product writes.
fn result_of(o: &Operands, product: Product) -> &[f32] {
    match product {
        Product::Forward => &o.y,
        Product::InputGrad => &o.dx,
        Product::WeightGrad => &o.dw,
    }
}

/// Each output of `product` on fresh operands, exactly (in f64), with the sum of its
/// terms' magnitudes.
fn exact(o: &Operands, product: Product) -> Vec<(f64, f64)> {
    let (m, inp, out) = (o.m, o.inp, o.out);
    let f = |v: f32| f64::from(v);
    let sum = |terms: &mut dyn Iterator<Item = f64>| terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
    let mut all = Vec::new();
    match product {
        Product::Forward => {
            for r in 0..m {
                for k in 0..out {
                    let terms = (0..inp).map(|i| f(o.w[k * inp + i]) * f(o.x[r * inp + i]));
                    all.push(sum(&mut std::iter::once(f(o.b[k])).chain(terms)));
                }
            }
        }
        Product::InputGrad => {
            for r in 0..m {
                for i in 0..inp {
                    all.push(sum(&mut (0..out).map(|k| f(o.dy[r * out + k]) * f(o.w[k * inp + i]))));
                }
            }
        }
        Product::WeightGrad => {
            for k in 0..out {
                for i in 0..inp {
                    all.push(sum(&mut (0..m).map(|r| f(o.dy[r * out + k]) * f(o.x[r * inp + i]))));
                }
            }
        }
    }
    all
}

/// The largest error of `kernel` on fresh operands against the exact products, relative
/// to the magnitude of each output's terms (what rounding in any summation order scales
/// with).
fn error(m: usize, inp: usize, out: usize, product: Product, kernel: Kernel) -> f64 {
    let mut o = Operands::new(m, inp, out);
    kernel(&mut o);
    let reference = exact(&o, product);
    result_of(&o, product)
        .iter()
        .zip(&reference)
        .map(|(&found, &(value, scale))| (f64::from(found) - value).abs() / scale.max(1e-30))
        .fold(0.0, f64::max)
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let budget = Duration::from_millis(if quick { 20 } else { 120 });
    if std::env::args().any(|a| a == "memory") {
        from_memory(budget);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "shapes") {
        shapes_only(budget, &args[at + 1..]);
        return;
    }
    let peak = std::env::var("AMP_PEAK_GFLOPS").ok().and_then(|p| p.parse().ok()).unwrap_or(PEAK_GFLOPS);
    let mut shapes: Vec<(usize, usize, usize, &str)> = Vec::new();
    for &(inp, out, what) in &LAYERS {
        for &m in &ROWS {
            // 25 rows: the canonical 25×300→750; other layers skip it.
            if m != 25 || (inp, out) == (300, 750) {
                shapes.push((m, inp, out, what));
            }
        }
    }
    shapes.extend(EXTRA);
    println!("f32 GEMM, one thread; GFLOP/s (% of a {peak:.0} GFLOP/s core); median of repetitions in one run.");
    println!("amp/mm and amp/hand: the executor's kernels over matrixmultiply and over the former loops;");
    println!("err: largest |error| against the exact (f64) product over the magnitude of the output's terms.");
    for product in [Product::Forward, Product::InputGrad, Product::WeightGrad] {
        let kernels = kernels_of(product);
        println!();
        print!("{:<12} {:<17} {:>12}", product.name(), "layer", "m×in→out");
        for (name, _) in &kernels {
            print!(" {name:>15}");
        }
        println!(" {:>7} {:>8} {:>8} {:>8}", "amp/mm", "amp/hand", "err hand", "err amp");
        for &(m, inp, out, what) in &shapes {
            let mut operands = Operands::new(m, inp, out);
            let flops = 2.0 * (m * inp * out) as f64;
            let mut rates = Vec::new();
            for (_, kernel) in &kernels {
                let time = median(budget, || {
                    kernel(black_box(&mut operands));
                });
                rates.push(flops / time.as_secs_f64() / 1e9);
            }
            print!("{:<12} {:<17} {:>12}", "", what, format!("{m}×{inp}→{out}"));
            for rate in &rates {
                print!(" {:>15}", format!("{rate:.1} ({:.0}%)", 100.0 * rate / peak));
            }
            let (hand, mm, amp) = (rates[0], rates[1], rates[rates.len() - 1]);
            let (hand_kernel, amp_kernel) = (kernels[0].1, kernels[kernels.len() - 1].1);
            println!(
                " {:>6.2}x {:>7.2}x {:>8.1e} {:>8.1e}",
                amp / mm,
                amp / hand,
                error(m, inp, out, product, hand_kernel),
                error(m, inp, out, product, amp_kernel),
            );
        }
    }
    from_memory(budget);
    println!();
    println!("The padded copies for the products of several rows: made again after each update that a batch sees");
    println!("{:<17} {:>10} {:>14} {:>12} {:>16}", "layer", "out×in", "padded W^T", "padded W", "one-row forwards");
    for &(inp, out, what) in &LAYERS {
        let w = values(out * inp, 2);
        let mut copy = Vec::new();
        let transpose = median(budget, || {
            amp_exec::kernels::transpose(black_box(&w), out, inp, &mut copy);
        });
        let pad = median(budget, || {
            amp_exec::kernels::pad_rows(black_box(&w), out, inp, &mut copy);
        });
        let mut one = Operands::new(1, inp, out);
        let row = median(budget, || amp::forward(black_box(&mut one)));
        println!(
            "{:<17} {:>10} {:>12.1}µs {:>10.1}µs {:>16.1}",
            what,
            format!("{out}×{inp}"),
            transpose.as_secs_f64() * 1e6,
            pad.as_secs_f64() * 1e6,
            transpose.as_secs_f64() / row.as_secs_f64()
        );
    }
}

/// The products of a few rows on a MoE expert's shape, each call on the next weight of a
/// pool of [`POOL`] (so from memory, not cache): the GEMM crate beside what the executor
/// runs on a weight in place (`skinny`'s products, which ask for the weight's rows ahead,
/// and the weight gradient as `kernels::linear_weight_grad` chooses), in µs per product.
fn from_memory(budget: Duration) {
    let (inp, out) = (256, 256);
    println!();
    println!("From memory: 256→256, each call on the next of {POOL} weights (µs per product; amp/gemm < 1 is faster)");
    println!(
        "{:>5} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9} {:>12} {:>12} {:>9}",
        "rows",
        "fwd gemm",
        "fwd skinny",
        "amp/gemm",
        "dx gemm",
        "dx skinny",
        "amp/gemm",
        "dW gemm",
        "dW amp",
        "amp/gemm"
    );
    let mut pool: Vec<Vec<f32>> = (0..POOL).map(|k| values(out * inp, 10 + k as u64)).collect();
    for m in POOL_ROWS {
        let mut o = Operands::new(m, inp, out);
        let mut next = 0;
        // `weight` picks the operand the pool stands in for: W, or the gradient dW.
        let mut time = |kernel: Kernel, weight: fn(&mut Operands) -> &mut Vec<f32>| {
            median(budget, || {
                std::mem::swap(weight(&mut o), &mut pool[next]);
                kernel(black_box(&mut o));
                std::mem::swap(weight(&mut o), &mut pool[next]);
                next = (next + 1) % POOL;
            })
            .as_secs_f64()
                * 1e6
        };
        fn w(o: &mut Operands) -> &mut Vec<f32> {
            &mut o.w
        }
        fn dw(o: &mut Operands) -> &mut Vec<f32> {
            &mut o.dw
        }
        let cells = [
            time(gemm_crate::forward, w),
            time(|o| kernels::linear_forward_rows_into(&o.x, &o.w, &o.b, &mut o.y, o.inp, o.out), w),
            time(gemm_crate::input_grad, w),
            time(
                |o| {
                    o.dx.fill(0.0);
                    kernels::rows_times_w(&o.dy, &o.w, &mut o.dx, o.inp, o.out);
                },
                w,
            ),
            time(gemm_crate::weight_grad, dw),
            time(amp::weight_grad, dw),
        ];
        print!("{m:>5}");
        for pair in cells.chunks_exact(2) {
            print!(" {:>12.1} {:>12.1} {:>8.2}x", pair[0], pair[1], pair[1] / pair[0]);
        }
        println!();
    }
}
