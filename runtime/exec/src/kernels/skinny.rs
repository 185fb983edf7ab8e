//! The Linear products of a few rows on a weight read once, in place: for a weight that
//! changes between nearly every batch it serves (a MoE expert, updated after each), where a
//! padded copy would be made for one batch and the GEMM crate packs the whole weight at
//! every call of more than one row. Either costs about what the product of 8 rows does on
//! a 256→256 weight, so batching such a weight gained nothing over one row at a time.
//!
//! Both kernels walk the weight once, a small block of it at a time, and apply each block
//! to all the rows while it sits in L1; the rows stay in L1 or L2 (a few KiB each). The
//! SIMD is `pulp`'s (the GEMM crate's own dependency): safe code, generic over the vector
//! width, dispatched at run time to AVX-512, AVX2 + FMA or scalar code.
//!
//! The `_paying` forms first add an update the weight still owes (`W += dyᵀx` over a few
//! rows, see [`Owed`]) to each block of it, then use the block while it is in L1 or L2:
//! one pass over the weight where an update of its own and the product took two. A MoE
//! expert's weight comes from L3 or memory at every use (64 × 2 of them, 33 MiB), so the
//! passes, not the arithmetic, are what its products cost.

use pulp::{Arch, Simd, WithSimd};

/// Weight rows per block of [`rows_times_wt`] (each row's dot products with a block of
/// `X_BLOCK` input rows in registers: 4 × 4 accumulators, 8 loads for 16 FMAs; blocks of
/// 2 and 1 rows take the rest). 4 × 2 was 10% slower at 8 to 32 rows (2026-11-24).
const W_BLOCK: usize = 4;
const X_BLOCK: usize = 4;
/// Input gradient rows per block of [`rows_times_w`], and SIMD vectors per column strip
/// (4 × 4 accumulators, 4 loads and 4 broadcasts for 16 FMAs; narrower blocks and strips
/// take the rest). 4 × 2 reached 88 GFLOP/s on a 256→256 weight in cache, this 110.
const DY_BLOCK: usize = 4;
const STRIP: usize = 4;

/// `y += x Wᵀ` for `x: [rows, inp]`, `W: [out, inp]`, `y: [rows, out]`, row-major.
///
/// # Panics
/// When the lengths do not fit `inp` and `out`.
pub fn rows_times_wt(x: &[f32], w: &[f32], y: &mut [f32], inp: usize, out: usize) {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    assert!(x.len() == rows * inp && w.len() == out * inp && y.len() == rows * out, "rows_times_wt: shapes differ");
    if rows == 0 || out == 0 || inp == 0 {
        return;
    }
    Arch::new().dispatch(DotRows { x, w: Weight::Read(w), y, inp, out });
}

/// `dx += dy W` for `dy: [rows, out]`, `W: [out, inp]`, `dx: [rows, inp]`, row-major.
///
/// # Panics
/// When the lengths do not fit `inp` and `out`.
pub fn rows_times_w(dy: &[f32], w: &[f32], dx: &mut [f32], inp: usize, out: usize) {
    let rows = dy.len().checked_div(out).unwrap_or(0);
    assert!(dy.len() == rows * out && w.len() == out * inp && dx.len() == rows * inp, "rows_times_w: shapes differ");
    if rows == 0 || out == 0 || inp == 0 {
        return;
    }
    Arch::new().dispatch(AxpyRows { dy, w: Weight::Read(w), dx, inp, out });
}

/// An update a weight owes: `W += dyᵀ x` for `dy: [rows, out]` and `x: [rows, inp]`
/// (row-major; `dy` already scaled by the step).
#[derive(Clone, Copy)]
pub struct Owed<'a> {
    pub dy: &'a [f32],
    pub x: &'a [f32],
}

impl Owed<'_> {
    fn fits(&self, inp: usize, out: usize) -> bool {
        let rows = self.x.len().checked_div(inp).unwrap_or(0);
        self.x.len() == rows * inp && self.dy.len() == rows * out
    }
}

/// [`rows_times_wt`] after adding `owed` to `W`, block by block in the same pass.
///
/// # Panics
/// When the lengths do not fit `inp` and `out`.
pub fn rows_times_wt_paying(x: &[f32], w: &mut [f32], owed: Owed, y: &mut [f32], inp: usize, out: usize) {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    assert!(
        x.len() == rows * inp && w.len() == out * inp && y.len() == rows * out && owed.fits(inp, out),
        "rows_times_wt_paying: shapes differ"
    );
    if out == 0 || inp == 0 {
        return;
    }
    Arch::new().dispatch(DotRows { x, w: Weight::Paying(w, owed), y, inp, out });
}

/// [`rows_times_w`] after adding `owed` to `W`, strip by strip in the same pass.
///
/// # Panics
/// When the lengths do not fit `inp` and `out`.
pub fn rows_times_w_paying(dy: &[f32], w: &mut [f32], owed: Owed, dx: &mut [f32], inp: usize, out: usize) {
    let rows = dy.len().checked_div(out).unwrap_or(0);
    assert!(
        dy.len() == rows * out && w.len() == out * inp && dx.len() == rows * inp && owed.fits(inp, out),
        "rows_times_w_paying: shapes differ"
    );
    if out == 0 || inp == 0 {
        return;
    }
    Arch::new().dispatch(AxpyRows { dy, w: Weight::Paying(w, owed), dx, inp, out });
}

/// The weight a kernel reads: as it is, or after adding what it owes.
enum Weight<'a> {
    Read(&'a [f32]),
    Paying(&'a mut [f32], Owed<'a>),
}

impl Weight<'_> {
    fn values(&self) -> &[f32] {
        match self {
            Weight::Read(w) => w,
            Weight::Paying(w, _) => w,
        }
    }
}

/// The owed rows of `x` as SIMD vectors (their columns past the last whole vector are
/// read from `Owed::x` itself).
fn owed_vectors<'o, S: Simd>(owed: &Owed<'o>, inp: usize) -> Vec<&'o [S::f32s]> {
    owed.x.chunks_exact(inp).map(|row| S::as_simd_f32s(row).0).collect()
}

/// Adds `owed` to weight rows `o..o + B`: a tile of the `B` rows × [`STRIP`] vectors of
/// columns at a time in registers, over all the owed rows (4 loads and 4 broadcasts for
/// 16 FMAs, as in [`axpys`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pay_rows<S: Simd, const B: usize>(
    simd: S,
    w: &mut [f32],
    owed: &Owed,
    owed_x: &[&[S::f32s]],
    o: usize,
    inp: usize,
    out: usize,
) {
    let mut rest = &mut w[o * inp..(o + B) * inp];
    let mut block: [(&mut [S::f32s], &mut [f32]); B] = std::array::from_fn(|_| {
        let (row, others) = std::mem::take(&mut rest).split_at_mut(inp);
        rest = others;
        S::as_mut_simd_f32s(row)
    });
    let vectors = inp / S::F32_LANES;
    let mut c = 0;
    while c < vectors {
        match step(vectors - c, STRIP) {
            STRIP => pay_tile::<S, B, STRIP>(simd, &mut block, owed, owed_x, o, c, out),
            2 => pay_tile::<S, B, 2>(simd, &mut block, owed, owed_x, o, c, out),
            _ => pay_tile::<S, B, 1>(simd, &mut block, owed, owed_x, o, c, out),
        }
        c += step(vectors - c, STRIP);
    }
    for (j, (_, tail)) in block.iter_mut().enumerate() {
        let first = inp - tail.len();
        for (k, t) in tail.iter_mut().enumerate() {
            *t += owed
                .dy
                .chunks_exact(out)
                .zip(owed.x.chunks_exact(inp))
                .map(|(d, x)| d[o + j] * x[first + k])
                .sum::<f32>();
        }
    }
}

/// Adds `owed` to vectors `c..c + V` of the `B` weight rows from row `o`.
#[inline(always)]
fn pay_tile<S: Simd, const B: usize, const V: usize>(
    simd: S,
    block: &mut [(&mut [S::f32s], &mut [f32]); B],
    owed: &Owed,
    owed_x: &[&[S::f32s]],
    o: usize,
    c: usize,
    out: usize,
) {
    let mut acc: [[S::f32s; V]; B] = std::array::from_fn(|j| std::array::from_fn(|v| block[j].0[c + v]));
    for (x, d) in owed_x.iter().zip(owed.dy.chunks_exact(out)) {
        let xs: [S::f32s; V] = std::array::from_fn(|v| x[c + v]);
        let ds: [f32; B] = std::array::from_fn(|j| d[o + j]);
        for (acc_j, &dj) in acc.iter_mut().zip(&ds) {
            let dv = simd.splat_f32s(dj);
            for (a, &xv) in acc_j.iter_mut().zip(&xs) {
                *a = simd.mul_add_e_f32s(dv, xv, *a);
            }
        }
    }
    for ((row, _), acc_j) in block.iter_mut().zip(&acc) {
        row[c..c + V].copy_from_slice(acc_j);
    }
}

/// The block to take with `left` rows (or vectors) to go: a whole one of `full`, else 2,
/// else 1 (the kernels have arms for these three).
fn step(left: usize, full: usize) -> usize {
    if left >= full {
        full
    } else if left >= 2 {
        2
    } else {
        1
    }
}

struct DotRows<'a> {
    x: &'a [f32],
    w: Weight<'a>,
    y: &'a mut [f32],
    inp: usize,
    out: usize,
}

impl WithSimd for DotRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let DotRows { x, mut w, y, inp, out } = self;
        let rows = x.len() / inp;
        let owed_x = match &w {
            Weight::Paying(_, owed) => owed_vectors::<S>(owed, inp),
            Weight::Read(_) => Vec::new(),
        };
        let mut o = 0;
        // A block of weight rows (paid first) against every input row, then the next.
        while o < out {
            let block = if out - o >= W_BLOCK { W_BLOCK } else { 1 };
            if let Weight::Paying(w, owed) = &mut w {
                if block == W_BLOCK {
                    pay_rows::<S, W_BLOCK>(simd, w, owed, &owed_x, o, inp, out);
                } else {
                    pay_rows::<S, 1>(simd, w, owed, &owed_x, o, inp, out);
                }
            }
            let w = w.values();
            let mut r = 0;
            while r < rows {
                let pair = step(rows - r, X_BLOCK);
                match (block, pair) {
                    (W_BLOCK, X_BLOCK) => dots::<S, W_BLOCK, X_BLOCK>(simd, w, x, y, inp, out, o, r),
                    (W_BLOCK, 2) => dots::<S, W_BLOCK, 2>(simd, w, x, y, inp, out, o, r),
                    (W_BLOCK, _) => dots::<S, W_BLOCK, 1>(simd, w, x, y, inp, out, o, r),
                    (_, X_BLOCK) => dots::<S, 1, X_BLOCK>(simd, w, x, y, inp, out, o, r),
                    (_, 2) => dots::<S, 1, 2>(simd, w, x, y, inp, out, o, r),
                    _ => dots::<S, 1, 1>(simd, w, x, y, inp, out, o, r),
                }
                r += pair;
            }
            o += block;
        }
    }
}

/// `y[r + k][o + j] += W[o + j] · x[r + k]` for `j < WB`, `k < XB`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dots<S: Simd, const WB: usize, const XB: usize>(
    simd: S,
    w: &[f32],
    x: &[f32],
    y: &mut [f32],
    inp: usize,
    out: usize,
    o: usize,
    r: usize,
) {
    let w_rows: [(&[S::f32s], &[f32]); WB] = std::array::from_fn(|j| S::as_simd_f32s(&w[(o + j) * inp..][..inp]));
    let x_rows: [(&[S::f32s], &[f32]); XB] = std::array::from_fn(|k| S::as_simd_f32s(&x[(r + k) * inp..][..inp]));
    let vectors = inp / S::F32_LANES;
    let mut acc = [[simd.splat_f32s(0.0); XB]; WB];
    for c in 0..vectors {
        let xs: [S::f32s; XB] = std::array::from_fn(|k| x_rows[k].0[c]);
        for (acc_j, (w_row, _)) in acc.iter_mut().zip(&w_rows) {
            let wv = w_row[c];
            for (a, &xv) in acc_j.iter_mut().zip(&xs) {
                *a = simd.mul_add_e_f32s(wv, xv, *a);
            }
        }
    }
    for (j, (acc_j, (_, w_tail))) in acc.iter().zip(&w_rows).enumerate() {
        for (k, (a, (_, x_tail))) in acc_j.iter().zip(&x_rows).enumerate() {
            let tail: f32 = w_tail.iter().zip(*x_tail).map(|(a, b)| a * b).sum();
            y[(r + k) * out + o + j] += simd.reduce_sum_f32s(*a) + tail;
        }
    }
}

struct AxpyRows<'a> {
    dy: &'a [f32],
    w: Weight<'a>,
    dx: &'a mut [f32],
    inp: usize,
    out: usize,
}

impl WithSimd for AxpyRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let AxpyRows { dy, mut w, dx, inp, out } = self;
        let rows = dy.len() / out;
        let vectors = inp / S::F32_LANES;
        let owed_x = match &w {
            Weight::Paying(_, owed) => owed_vectors::<S>(owed, inp),
            Weight::Read(_) => Vec::new(),
        };
        // A strip of the weight's columns (all its rows: out × 4 vectors, 32 KiB for 256
        // rows of AVX2 vectors; paid first) against every gradient row, then the next.
        let mut c = 0;
        while c < vectors {
            let width = step(vectors - c, STRIP);
            if let Weight::Paying(w, owed) = &mut w {
                match width {
                    STRIP => pay_strip::<S, STRIP>(simd, w, owed, &owed_x, c, inp, out),
                    2 => pay_strip::<S, 2>(simd, w, owed, &owed_x, c, inp, out),
                    _ => pay_strip::<S, 1>(simd, w, owed, &owed_x, c, inp, out),
                }
            }
            let w = w.values();
            let mut r = 0;
            while r < rows {
                let block = step(rows - r, DY_BLOCK);
                match (block, width) {
                    (DY_BLOCK, STRIP) => axpys::<S, DY_BLOCK, STRIP>(simd, dy, w, dx, inp, out, r, c),
                    (DY_BLOCK, 2) => axpys::<S, DY_BLOCK, 2>(simd, dy, w, dx, inp, out, r, c),
                    (DY_BLOCK, _) => axpys::<S, DY_BLOCK, 1>(simd, dy, w, dx, inp, out, r, c),
                    (2, STRIP) => axpys::<S, 2, STRIP>(simd, dy, w, dx, inp, out, r, c),
                    (2, 2) => axpys::<S, 2, 2>(simd, dy, w, dx, inp, out, r, c),
                    (2, _) => axpys::<S, 2, 1>(simd, dy, w, dx, inp, out, r, c),
                    (_, STRIP) => axpys::<S, 1, STRIP>(simd, dy, w, dx, inp, out, r, c),
                    (_, 2) => axpys::<S, 1, 2>(simd, dy, w, dx, inp, out, r, c),
                    _ => axpys::<S, 1, 1>(simd, dy, w, dx, inp, out, r, c),
                }
                r += block;
            }
            c += width;
        }
        // The columns past the last whole vector (paid first), as one partial vector per
        // row.
        let first = vectors * S::F32_LANES;
        if first < inp {
            if let Weight::Paying(w, owed) = &mut w {
                for (o, w_row) in w.chunks_exact_mut(inp).enumerate() {
                    for (i, v) in w_row.iter_mut().enumerate().skip(first) {
                        *v += owed
                            .dy
                            .chunks_exact(out)
                            .zip(owed.x.chunks_exact(inp))
                            .map(|(d, x)| d[o] * x[i])
                            .sum::<f32>();
                    }
                }
            }
            let w = w.values();
            for (dy_row, dx_row) in dy.chunks_exact(out).zip(dx.chunks_exact_mut(inp)) {
                let mut acc = simd.splat_f32s(0.0);
                for (&d, w_row) in dy_row.iter().zip(w.chunks_exact(inp)) {
                    acc = simd.mul_add_e_f32s(simd.splat_f32s(d), simd.partial_load_f32s(&w_row[first..]), acc);
                }
                let to = &mut dx_row[first..];
                let sum = simd.add_f32s(simd.partial_load_f32s(to), acc);
                simd.partial_store_f32s(to, sum);
            }
        }
    }
}

/// Adds `owed` to the `V` vectors of columns from vector `c` of every weight row, in
/// tiles of [`W_BLOCK`] rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pay_strip<S: Simd, const V: usize>(
    simd: S,
    w: &mut [f32],
    owed: &Owed,
    owed_x: &[&[S::f32s]],
    c: usize,
    inp: usize,
    out: usize,
) {
    let mut o = 0;
    let mut rows = w.chunks_exact_mut(inp).map(|row| S::as_mut_simd_f32s(row));
    while o < out {
        if out - o >= W_BLOCK {
            let mut block: [_; W_BLOCK] = std::array::from_fn(|_| rows.next().unwrap_or_default());
            pay_tile::<S, W_BLOCK, V>(simd, &mut block, owed, owed_x, o, c, out);
            o += W_BLOCK;
        } else {
            let mut block = [rows.next().unwrap_or_default()];
            pay_tile::<S, 1, V>(simd, &mut block, owed, owed_x, o, c, out);
            o += 1;
        }
    }
}

/// `dx[r + k][cols] += Σ_o dy[r + k][o] W[o][cols]` for `k < RB` over the `V` vectors of
/// columns from vector `c`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn axpys<S: Simd, const RB: usize, const V: usize>(
    simd: S,
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    inp: usize,
    out: usize,
    r: usize,
    c: usize,
) {
    let (first, width) = (c * S::F32_LANES, V * S::F32_LANES);
    let dy_rows: [&[f32]; RB] = std::array::from_fn(|k| &dy[(r + k) * out..][..out]);
    let mut acc = [[simd.splat_f32s(0.0); V]; RB];
    for (o, w_row) in w.chunks_exact(inp).enumerate() {
        let (wv, _) = S::as_simd_f32s(&w_row[first..first + width]);
        for (acc_k, dy_row) in acc.iter_mut().zip(&dy_rows) {
            let d = simd.splat_f32s(dy_row[o]);
            for (a, &v) in acc_k.iter_mut().zip(wv) {
                *a = simd.mul_add_e_f32s(d, v, *a);
            }
        }
    }
    for (k, acc_k) in acc.iter().enumerate() {
        let (to, _) = S::as_mut_simd_f32s(&mut dx[(r + k) * inp + first..][..width]);
        for (t, a) in to.iter_mut().zip(acc_k) {
            *t = simd.add_f32s(*t, *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 2654435761 + seed * 40503) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Shapes around the SIMD widths (4, 8 and 16 lanes) and the blocks, with rows that
    /// leave every kind of remainder; the results add to what `y` and `dx` held.
    #[test]
    fn the_products_match_the_naive_ones() {
        for (rows, inp, out) in
            [(1, 1, 1), (2, 7, 3), (3, 8, 4), (5, 17, 9), (4, 16, 8), (7, 33, 13), (9, 256, 256), (6, 300, 45)]
        {
            let (x, w) = (values(rows * inp, 1), values(out * inp, 2));
            let dy = values(rows * out, 3);
            let mut y = values(rows * out, 4);
            let mut dx = values(rows * inp, 5);
            let (y0, dx0) = (y.clone(), dx.clone());
            rows_times_wt(&x, &w, &mut y, inp, out);
            rows_times_w(&dy, &w, &mut dx, inp, out);
            for r in 0..rows {
                for o in 0..out {
                    let want = y0[r * out + o] + (0..inp).map(|i| x[r * inp + i] * w[o * inp + i]).sum::<f32>();
                    let got = y[r * out + o];
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()) * inp as f32,
                        "y {rows}×{inp}→{out} ({r}, {o}): {got} vs {want}"
                    );
                }
                for i in 0..inp {
                    let want = dx0[r * inp + i] + (0..out).map(|o| dy[r * out + o] * w[o * inp + i]).sum::<f32>();
                    let got = dx[r * inp + i];
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()) * out as f32,
                        "dx {rows}×{inp}→{out} ({r}, {i}): {got} vs {want}"
                    );
                }
            }
        }
    }

    /// The paying forms leave `W + dyᵀx` in the weight and compute the products with it,
    /// for every kind of remainder of weight rows, columns and owed rows (none included).
    #[test]
    fn the_paying_products_use_the_paid_weight() {
        for (rows, inp, out, owed_rows) in [
            (1, 1, 1, 1),
            (2, 7, 3, 2),
            (3, 8, 4, 0),
            (5, 17, 9, 3),
            (4, 16, 8, 5),
            (7, 33, 13, 1),
            (9, 256, 256, 8),
            (0, 40, 6, 2),
        ] {
            let (x, w) = (values(rows * inp, 1), values(out * inp, 2));
            let dy = values(rows * out, 3);
            let (owed_dy, owed_x) = (values(owed_rows * out, 6), values(owed_rows * inp, 7));
            let owed = Owed { dy: &owed_dy, x: &owed_x };
            let mut paid = w.clone();
            for (o, row) in paid.chunks_exact_mut(inp).enumerate() {
                for (i, v) in row.iter_mut().enumerate() {
                    *v += (0..owed_rows).map(|r| owed_dy[r * out + o] * owed_x[r * inp + i]).sum::<f32>();
                }
            }
            let (mut y_want, mut dx_want) = (values(rows * out, 4), values(rows * inp, 5));
            let (mut y, mut dx) = (y_want.clone(), dx_want.clone());
            rows_times_wt(&x, &paid, &mut y_want, inp, out);
            rows_times_w(&dy, &paid, &mut dx_want, inp, out);
            let mut w_fwd = w.clone();
            rows_times_wt_paying(&x, &mut w_fwd, owed, &mut y, inp, out);
            let mut w_bwd = w.clone();
            rows_times_w_paying(&dy, &mut w_bwd, owed, &mut dx, inp, out);
            let close = |a: &[f32], b: &[f32], what: &str| {
                for (k, (p, q)) in a.iter().zip(b).enumerate() {
                    assert!(
                        (p - q).abs() <= 1e-5 * (1.0 + q.abs()) * (inp + out) as f32,
                        "{what} {rows}×{inp}→{out} [{k}]: {p} vs {q}"
                    );
                }
            };
            close(&w_fwd, &paid, "weight paid by the forward");
            close(&w_bwd, &paid, "weight paid by the input gradient");
            close(&y, &y_want, "y");
            close(&dx, &dx_want, "dx");
        }
    }

    #[test]
    fn empty_shapes_do_nothing() {
        let mut y = vec![1.0; 3];
        rows_times_wt(&[], &[0.0; 12], &mut [], 4, 3);
        rows_times_w(&[], &[0.0; 12], &mut [], 4, 3);
        rows_times_wt(&[1.0; 0], &[], &mut y[..0], 0, 3);
        assert_eq!(y, vec![1.0; 3]);
    }
}
