//! The dense math of the ops, on row-major slices: the Linear products through the GEMM
//! crate (`matmul`, the only `unsafe` of the executor), the rest plain loops the compiler
//! vectorizes (the JIT replaces them later behind the same signatures).

mod matmul;
mod skinny;

use matmul::{matmul, matmul_new, Mat};
pub use skinny::{add_outer_rows, rows_times_w, rows_times_wt};

/// `a · b` with eight partial sums (so the loop vectorizes without reassociation flags).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.len().min(b.len()) / 8;
    for (ca, cb) in a.chunks_exact(8).zip(b.chunks_exact(8)).take(chunks) {
        for k in 0..8 {
            acc[k] += ca[k] * cb[k];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (x, y) in a.iter().zip(b).skip(chunks * 8) {
        sum += x * y;
    }
    sum
}

/// `y += alpha * x`.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// `y = x W^T + b` for `x: [rows, inp]`, `W: [out, inp]`, `b: [out]`, into `y: [rows, out]`
/// (one GEMM, whatever the rows: several messages batched into one matrix are one call).
///
/// # Panics
/// When the lengths do not fit `rows`, `inp` and `out`.
pub fn linear_forward_into(x: &[f32], w: &[f32], b: &[f32], y: &mut [f32], inp: usize, out: usize) {
    fill_with_bias(y, b, out);
    add_x_wt(x, w, y, inp, out);
}

/// `y += x W^T`, one GEMM.
fn add_x_wt(x: &[f32], w: &[f32], y: &mut [f32], inp: usize, out: usize) {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    matmul(y, Mat::row_major(x, rows, inp), Mat::row_major(w, out, inp).t(), true);
}

/// Every `out`-wide row of `y` set to the bias `b`, which the products then add to.
fn fill_with_bias(y: &mut [f32], b: &[f32], out: usize) {
    assert_eq!(b.len(), out, "linear: the bias is not [{out}]");
    for row in y.chunks_exact_mut(out.max(1)) {
        row.copy_from_slice(b);
    }
}

/// [`linear_forward_into`] on a weight read in place once whatever the rows: one row
/// through the GEMM crate's one-row path, several by [`rows_times_wt`] (the crate packs
/// the whole weight at every call of several rows on a transposed view, which is what the
/// product of 8 rows costs on a 256→256 weight).
pub fn linear_forward_rows_into(x: &[f32], w: &[f32], b: &[f32], y: &mut [f32], inp: usize, out: usize) {
    fill_with_bias(y, b, out);
    add_rows_times_wt(x, w, y, inp, out);
}

/// [`linear_forward_rows_into`] into a new vector, written once (no zeros first).
pub fn linear_forward_rows(x: &[f32], w: &[f32], b: &[f32], inp: usize, out: usize) -> Vec<f32> {
    let mut y = bias_rows(b, x.len().checked_div(inp).unwrap_or(0), out);
    add_rows_times_wt(x, w, &mut y, inp, out);
    y
}

/// `y += x W^T`: one row through the GEMM crate's one-row path, several by [`rows_times_wt`].
fn add_rows_times_wt(x: &[f32], w: &[f32], y: &mut [f32], inp: usize, out: usize) {
    if x.len() <= inp {
        add_x_wt(x, w, y, inp, out);
    } else {
        rows_times_wt(x, w, y, inp, out);
    }
}

/// `rows` rows of `ld` values: the bias `b`, then zeros; each value written once. The
/// first row is written, then the rows so far copied after themselves, doubling: a copy
/// per row cost more in calls than in bytes on narrow layers (GGSNN's 32 columns).
fn bias_rows(b: &[f32], rows: usize, ld: usize) -> Vec<f32> {
    assert!(b.len() <= ld, "linear: the bias is longer than the rows ({ld})");
    let total = rows * ld;
    let mut y = Vec::with_capacity(total);
    if rows > 0 {
        y.extend_from_slice(b);
        y.resize(ld, 0.0);
    }
    while y.len() < total {
        y.extend_from_within(..y.len().min(total - y.len()));
    }
    y
}

/// The width, in `f32`, of the GEMM crate's SIMD panels (AVX-512: 16 lanes; a multiple of
/// AVX2's 8). The crate reads a weight in place only when its contiguous dimension is a
/// multiple of it, and copies ("packs") it whole at every call otherwise; `matmul` splits
/// the ragged columns off into a second call, and the Linear op's products of several rows
/// run on copies of the weight whose rows are padded with zeros to [`padded`] widths,
/// which the crate streams from aligned rows instead of packing them at every call
/// (`cargo bench -p amp-benches --bench gemm` compares the paths).
pub const PANEL: usize = 16;

/// `n` rounded up to a multiple of [`PANEL`]: the row stride of a padded weight copy.
pub fn padded(n: usize) -> usize {
    n.next_multiple_of(PANEL)
}

/// [`linear_forward_into`] with the weight given transposed and padded, `wt = W^T: [inp,
/// ld]` with `ld = padded(out)` and zeros past column `out` (see [`transpose`]), into `y:
/// [rows, ld]`, whose columns past `out` come out zero. On several rows the GEMM streams
/// this copy's aligned rows, where a transposed view of `W` would be packed again at every
/// call; on one row packing costs nothing worth avoiding, and the view serves as well.
pub fn linear_forward_t_into(x: &[f32], wt: &[f32], b: &[f32], y: &mut [f32], inp: usize, ld: usize) {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    assert!(b.len() <= ld, "linear: the bias is longer than the rows ({ld})");
    for row in y.chunks_exact_mut(ld.max(1)) {
        let (bias, padding) = row.split_at_mut(b.len());
        bias.copy_from_slice(b);
        padding.fill(0.0);
    }
    matmul(y, Mat::row_major(x, rows, inp), Mat::row_major(wt, inp, ld), true);
}

/// [`linear_forward_t_into`] into a new vector, written once (no zeros first).
pub fn linear_forward_t(x: &[f32], wt: &[f32], b: &[f32], inp: usize, ld: usize) -> Vec<f32> {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    let mut y = bias_rows(b, rows, ld);
    matmul(&mut y, Mat::row_major(x, rows, inp), Mat::row_major(wt, inp, ld), true);
    y
}

/// Copies the row-major `rows × cols` matrix `a` into `ap` with its rows `padded(cols)`
/// apart, zeros between them (for [`linear_input_grad`] on a padded `W`); returns
/// that row stride.
pub fn pad_rows(a: &[f32], rows: usize, cols: usize, ap: &mut Vec<f32>) -> usize {
    assert_eq!(a.len(), rows * cols, "pad_rows: the length is not {rows}×{cols}");
    let ld = padded(cols);
    // A reused buffer is overwritten, not cleared first: each line's values are copied,
    // its padding zeroed.
    ap.truncate(rows * ld);
    ap.resize(rows * ld, 0.0);
    for (to, from) in ap.chunks_exact_mut(ld.max(1)).zip(a.chunks_exact(cols.max(1))) {
        let (values, padding) = to.split_at_mut(cols);
        values.copy_from_slice(from);
        padding.fill(0.0);
    }
    ld
}

/// Writes the transpose of the row-major `rows × cols` matrix `a` into `at` (`cols ×
/// ld`, `ld = padded(rows)`, zero past column `rows`), by 8 × 8 tiles; returns `ld`.
///
/// # Panics
/// When the length of `a` is not `rows * cols`.
pub fn transpose(a: &[f32], rows: usize, cols: usize, at: &mut Vec<f32>) -> usize {
    const TILE: usize = 8;
    assert!(a.len() == rows * cols, "transpose: the length is not {rows}×{cols}");
    let ld = padded(rows);
    // Every value of a line but its padding is written below: only the padding is zeroed
    // (a reused buffer holds the previous copy).
    at.truncate(cols * ld);
    at.resize(cols * ld, 0.0);
    at.chunks_exact_mut(ld.max(1)).for_each(|line| line[rows..].fill(0.0));
    let (full_rows, full_cols) = (rows / TILE * TILE, cols / TILE * TILE);
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        simd.vectorize(Tiles8 { simd, a, cols, at: &mut at[..], ld, full_rows, full_cols });
        return transpose_edges(a, rows, cols, at, ld, full_rows, full_cols);
    }
    for r0 in (0..full_rows).step_by(TILE) {
        for c0 in (0..full_cols).step_by(TILE) {
            let mut tile = [[0.0f32; TILE]; TILE];
            for (i, line) in tile.iter_mut().enumerate() {
                let start = (r0 + i) * cols + c0;
                line.copy_from_slice(&a[start..start + TILE]);
            }
            for (j, column) in at[c0 * ld..(c0 + TILE) * ld].chunks_exact_mut(ld).enumerate() {
                for (v, line) in column[r0..r0 + TILE].iter_mut().zip(&tile) {
                    *v = line[j];
                }
            }
        }
    }
    transpose_edges(a, rows, cols, at, ld, full_rows, full_cols)
}

/// The ragged right edge of the tiled rows, then the rows below the tiles; returns `ld`.
fn transpose_edges(
    a: &[f32],
    rows: usize,
    cols: usize,
    at: &mut [f32],
    ld: usize,
    full_rows: usize,
    full_cols: usize,
) -> usize {
    for r in 0..rows {
        let from = if r < full_rows { full_cols } else { 0 };
        for c in from..cols {
            at[c * ld + r] = a[r * cols + c];
        }
    }
    ld
}

/// [`transpose`]'s 8 × 8 tiles with AVX shuffles (8 loads, 24 shuffles, 8 stores per
/// tile), two tiles per column store: the scalar tiles compile to a load and a store per
/// element, these move whole vectors.
#[cfg(target_arch = "x86_64")]
struct Tiles8<'a> {
    simd: pulp::x86::V3,
    a: &'a [f32],
    cols: usize,
    at: &'a mut [f32],
    ld: usize,
    full_rows: usize,
    full_cols: usize,
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for Tiles8<'_> {
    type Output = ();

    /// Two tiles one above the other at a time where there are, so that each store of a
    /// column fills a cache line of the copy (16 values).
    #[inline(always)]
    fn call(self) {
        let Tiles8 { simd, a, cols, at, ld, full_rows, full_cols } = self;
        let mut r0 = 0;
        while r0 < full_rows {
            let pair = full_rows - r0 >= 16;
            for c0 in (0..full_cols).step_by(8) {
                let upper = tile_columns(simd, a, cols, r0, c0);
                let lower = if pair { Some(tile_columns(simd, a, cols, r0 + 8, c0)) } else { None };
                for j in 0..8 {
                    let start = (c0 + j) * ld + r0;
                    at[start..start + 8].copy_from_slice(&pulp::cast::<_, [f32; 8]>(upper[j]));
                    if let Some(lower) = &lower {
                        at[start + 8..start + 16].copy_from_slice(&pulp::cast::<_, [f32; 8]>(lower[j]));
                    }
                }
            }
            r0 += if pair { 16 } else { 8 };
        }
    }
}

/// The 8 columns of the tile of `a` (row length `cols`) at rows `r0..r0 + 8`, columns
/// `c0..c0 + 8`: pairs of rows interleaved, then pairs of pairs, then 128-bit halves.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_columns(simd: pulp::x86::V3, a: &[f32], cols: usize, r0: usize, c0: usize) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::__m256;
    let avx = simd.avx;
    let load = |i: usize| {
        let mut line = [0.0f32; 8];
        let start = (r0 + i) * cols + c0;
        line.copy_from_slice(&a[start..start + 8]);
        pulp::cast::<[f32; 8], __m256>(line)
    };
    let r = [load(0), load(1), load(2), load(3), load(4), load(5), load(6), load(7)];
    let t = [
        avx._mm256_unpacklo_ps(r[0], r[1]),
        avx._mm256_unpackhi_ps(r[0], r[1]),
        avx._mm256_unpacklo_ps(r[2], r[3]),
        avx._mm256_unpackhi_ps(r[2], r[3]),
        avx._mm256_unpacklo_ps(r[4], r[5]),
        avx._mm256_unpackhi_ps(r[4], r[5]),
        avx._mm256_unpacklo_ps(r[6], r[7]),
        avx._mm256_unpackhi_ps(r[6], r[7]),
    ];
    let u = [
        avx._mm256_shuffle_ps::<0x44>(t[0], t[2]),
        avx._mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        avx._mm256_shuffle_ps::<0x44>(t[1], t[3]),
        avx._mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        avx._mm256_shuffle_ps::<0x44>(t[4], t[6]),
        avx._mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        avx._mm256_shuffle_ps::<0x44>(t[5], t[7]),
        avx._mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    [
        avx._mm256_permute2f128_ps::<0x20>(u[0], u[4]),
        avx._mm256_permute2f128_ps::<0x20>(u[1], u[5]),
        avx._mm256_permute2f128_ps::<0x20>(u[2], u[6]),
        avx._mm256_permute2f128_ps::<0x20>(u[3], u[7]),
        avx._mm256_permute2f128_ps::<0x31>(u[0], u[4]),
        avx._mm256_permute2f128_ps::<0x31>(u[1], u[5]),
        avx._mm256_permute2f128_ps::<0x31>(u[2], u[6]),
        avx._mm256_permute2f128_ps::<0x31>(u[3], u[7]),
    ]
}

/// [`linear_forward_into`] into a new vector.
pub fn linear_forward(x: &[f32], w: &[f32], b: &[f32], inp: usize, out: usize) -> Vec<f32> {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    let mut y = vec![0.0; rows * out];
    linear_forward_into(x, w, b, &mut y, inp, out);
    y
}

/// The input gradient of a linear layer: `dx = dy W: [rows, inp]` for `dy: [rows, out]`,
/// in a new buffer written once. `W` may be a padded copy (see [`pad_rows`]): with `inp`
/// its row stride, `dx` gets the padding's zero columns.
pub fn linear_input_grad(dy: &[f32], w: &[f32], inp: usize, out: usize) -> Vec<f32> {
    let rows = dy.len().checked_div(out).unwrap_or(0);
    matmul_new(Mat::row_major(dy, rows, out), Mat::row_major(w, out, inp))
}

/// The weight gradient of a linear layer: adds `dy^T x` to `dw: [out, inp]`; the rows of
/// `dy` and `x` are the batch. A few rows go through [`add_outer_rows`], one pass over
/// `dw` that asks for its rows ahead (see `OUTER_ROWS`); more through the GEMM crate.
pub fn linear_weight_grad(dy: &[f32], x: &[f32], dw: &mut [f32], inp: usize, out: usize) {
    let rows = dy.len().checked_div(out).unwrap_or(0);
    let large = dw.len() >= OUTER_LARGE_WEIGHT;
    if rows > 0 && (rows <= OUTER_ROWS || (large && rows <= OUTER_ROWS_LARGE)) {
        add_outer_rows(dy, x, dw, inp, out);
    } else {
        matmul(dw, Mat::row_major(dy, rows, out).t(), Mat::row_major(x, rows, inp), true);
    }
}

/// When [`linear_weight_grad`] adds its rows in one pass of its own over the weight: up to
/// `OUTER_ROWS` rows always, up to `OUTER_ROWS_LARGE` on a weight of `OUTER_LARGE_WEIGHT`
/// elements or more. The one pass reads the weight once and costs nothing to set up, so
/// it wins at a row or two; with more rows the GEMM crate's blocking wins on a weight in
/// cache, but a weight that sees only a few rows between updates (an expert of a large
/// MoE) usually comes from memory, where the single pass stays ahead up to the larger
/// limit (`cargo bench -p amp-benches --bench gemm` measures both sides of each limit).
const OUTER_ROWS: usize = 2;
const OUTER_ROWS_LARGE: usize = 16;
const OUTER_LARGE_WEIGHT: usize = 1 << 16;

/// The bias gradient of a linear layer: adds the column sums of `dy: [rows, out]` to `db`.
pub fn linear_bias_grad(dy: &[f32], db: &mut [f32]) {
    if db.is_empty() {
        return;
    }
    for row in dy.chunks_exact(db.len()) {
        axpy(1.0, row, db);
    }
}

/// The backward pass of [`linear_forward`]: returns `dx = dy W` and adds `dy^T x` to `dw`
/// and the column sums of `dy` to `db`.
pub fn linear_backward(
    x: &[f32],
    dy: &[f32],
    w: &[f32],
    dw: &mut [f32],
    db: &mut [f32],
    inp: usize,
    out: usize,
) -> Vec<f32> {
    let dx = linear_input_grad(dy, w, inp, out);
    linear_weight_grad(dy, x, dw, inp, out);
    linear_bias_grad(dy, db);
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_rows_repeat_the_bias_then_zeros() {
        let b = [1.0, 2.0, 3.0];
        for rows in [0, 1, 2, 3, 5, 8, 13] {
            for ld in [3, 4, 16] {
                let row: Vec<f32> = b.iter().copied().chain(std::iter::repeat_n(0.0, ld - 3)).collect();
                assert_eq!(bias_rows(&b, rows, ld), row.repeat(rows), "{rows} rows of {ld}");
            }
        }
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

    fn assert_close(found: &[f32], expected: &[f32], what: &str) {
        assert_eq!(found.len(), expected.len(), "{what}");
        for (i, (a, b)) in found.iter().zip(expected).enumerate() {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
        }
    }

    /// `found` against exact sums (`exact[i]` of terms whose magnitudes add up to
    /// `scale[i]`): within 1e-5 in norm, and each element within the error of an f32 sum
    /// (1e-6 of its terms' magnitude: a sum of hundreds of terms that nearly cancel has
    /// few correct digits in any order of summation).
    fn assert_sums(found: &[f32], exact: &[(f64, f64)], what: &str) {
        assert_eq!(found.len(), exact.len(), "{what}");
        let mut diff2 = 0.0;
        let mut norm2 = 0.0;
        for (i, (&a, &(e, scale))) in found.iter().zip(exact).enumerate() {
            let d = (f64::from(a) - e).abs();
            assert!(d <= 1e-5 * e.abs() + 1e-6 * scale + 1e-7, "{what}[{i}]: {a} vs {e} (terms {scale})");
            diff2 += d * d;
            norm2 += e * e;
        }
        assert!(diff2.sqrt() <= 1e-5 * norm2.sqrt() + 1e-7, "{what}: |difference| {}", diff2.sqrt());
    }

    /// The sum of `terms` and of their magnitudes, in f64.
    fn exact(terms: impl Iterator<Item = f64>) -> (f64, f64) {
        terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()))
    }

    /// Each product of a linear layer against the naive triple loop, at one row, odd
    /// sizes, and the canonical models' shapes.
    #[test]
    fn linear_products_match_the_naive_loops() {
        let shapes =
            [(1, 3, 4), (2, 3, 4), (1, 1, 1), (1, 300, 750), (3, 17, 5), (7, 1, 9), (25, 300, 750), (33, 129, 65)];
        for (rows, inp, out) in shapes {
            let x = values(rows * inp, 1);
            let w = values(out * inp, 2);
            let b = values(out, 3);
            let dy = values(rows * out, 4);
            let what = format!("{rows}×{inp}→{out}");
            // The naive loops in f64: the reference any f32 order of summation approaches.
            let f = |v: f32| f64::from(v);
            let mut y = Vec::new();
            for r in 0..rows {
                for o in 0..out {
                    let terms = (0..inp).map(|i| f(w[o * inp + i]) * f(x[r * inp + i]));
                    y.push(exact(std::iter::once(f(b[o])).chain(terms)));
                }
            }
            assert_sums(&linear_forward(&x, &w, &b, inp, out), &y, &format!("forward {what}"));
            let mut dx = Vec::new();
            for r in 0..rows {
                for i in 0..inp {
                    dx.push(exact((0..out).map(|o| f(dy[r * out + o]) * f(w[o * inp + i]))));
                }
            }
            let found = linear_input_grad(&dy, &w, inp, out);
            assert_sums(&found, &dx, &format!("input gradient {what}"));
            // The weight gradient accumulates onto what is there.
            let start = values(out * inp, 5);
            let mut dw = Vec::new();
            for o in 0..out {
                for i in 0..inp {
                    let terms = (0..rows).map(|r| f(dy[r * out + o]) * f(x[r * inp + i]));
                    dw.push(exact(std::iter::once(f(start[o * inp + i])).chain(terms)));
                }
            }
            let mut found = start;
            linear_weight_grad(&dy, &x, &mut found, inp, out);
            assert_sums(&found, &dw, &format!("weight gradient {what}"));
            let db: Vec<f32> = (0..out).map(|o| 1.0 + (0..rows).map(|r| dy[r * out + o]).sum::<f32>()).collect();
            let mut found = vec![1.0; out];
            linear_bias_grad(&dy, &mut found);
            assert_close(&found, &db, &format!("bias gradient {what}"));
            // And all three together.
            let (mut dw2, mut db2) = (values(out * inp, 5), vec![1.0; out]);
            let dx2 = linear_backward(&x, &dy, &w, &mut dw2, &mut db2, inp, out);
            assert_sums(&dx2, &dx, &format!("backward dx {what}"));
            assert_sums(&dw2, &dw, &format!("backward dW {what}"));
            assert_close(&db2, &db, &format!("backward db {what}"));
        }
    }

    #[test]
    fn the_padded_weight_copies_give_the_same_products() {
        for (rows, inp, out) in [(1, 1, 1), (2, 3, 4), (9, 17, 11), (3, 16, 32), (25, 300, 750), (8, 256, 256)] {
            let x = values(rows * inp, 6);
            let w = values(out * inp, 7);
            let b = values(out, 8);
            // A reused buffer of the same size holds stale values: the padding is zeroed.
            let mut wt = vec![f32::NAN; inp * padded(out)];
            let ld = transpose(&w, out, inp, &mut wt);
            assert!(ld >= out && ld.is_multiple_of(PANEL) && ld < out + PANEL);
            assert_eq!(wt.len(), inp * ld);
            for i in 0..inp {
                for o in 0..ld {
                    assert_eq!(wt[i * ld + o], if o < out { w[o * inp + i] } else { 0.0 });
                }
            }
            let mut y = vec![f32::NAN; rows * ld];
            linear_forward_t_into(&x, &wt, &b, &mut y, inp, ld);
            let f = |v: f32| f64::from(v);
            let mut expected = Vec::new();
            for r in 0..rows {
                for o in 0..ld {
                    if o < out {
                        let terms = (0..inp).map(|i| f(w[o * inp + i]) * f(x[r * inp + i]));
                        expected.push(exact(std::iter::once(f(b[o])).chain(terms)));
                    } else {
                        expected.push((0.0, 0.0));
                    }
                }
            }
            assert_sums(&y, &expected, &format!("forward {rows}×{inp}→{out}"));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&linear_forward_t(&x, &wt, &b, inp, ld)), bits(&y), "linear_forward_t");
            let mut on_w = vec![f32::NAN; rows * out];
            linear_forward_rows_into(&x, &w, &b, &mut on_w, inp, out);
            assert_eq!(bits(&linear_forward_rows(&x, &w, &b, inp, out)), bits(&on_w), "linear_forward_rows");
            // The input gradient on `W` with padded rows: the padding's columns are zero.
            let dy = values(rows * out, 9);
            let mut wp = vec![f32::NAN; out * padded(inp)];
            let ldi = pad_rows(&w, out, inp, &mut wp);
            assert!(wp.iter().all(|v| !v.is_nan()));
            assert!(ldi >= inp && ldi.is_multiple_of(PANEL) && ldi < inp + PANEL);
            let dx = linear_input_grad(&dy, &wp, ldi, out);
            let mut expected = Vec::new();
            for r in 0..rows {
                for i in 0..ldi {
                    let terms = (0..out).map(|o| if i < inp { f(dy[r * out + o]) * f(w[o * inp + i]) } else { 0.0 });
                    expected.push(exact(terms));
                }
            }
            assert_sums(&dx, &expected, &format!("input gradient {rows}×{inp}→{out}"));
        }
    }

    #[test]
    fn zero_rows_are_empty_products() {
        assert!(linear_forward(&[], &[1.0; 6], &[0.0; 2], 3, 2).is_empty());
        let (mut dw, mut db) = (vec![1.0; 6], vec![1.0; 2]);
        assert!(linear_backward(&[], &[], &[1.0; 6], &mut dw, &mut db, 3, 2).is_empty());
        assert_eq!((dw, db), (vec![1.0; 6], vec![1.0; 2]));
    }
}
