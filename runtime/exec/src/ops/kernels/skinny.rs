//! The Linear products of a few rows on a weight read once, in place: for a weight that
//! changes between nearly every batch it serves (a MoE expert, updated after each), where a
//! padded copy would be made for one batch and the GEMM crate packs the whole weight at
//! every call of more than one row. Either costs about what the product of 8 rows does on
//! a 256→256 weight, so batching such a weight gained nothing over one row at a time.
//!
//! The three kernels (`x Wᵀ`, `dy W`, and the weight gradient `W += aᵀ x` added in
//! place) walk the weight once, a small block of it at a time, and apply each block to
//! all the rows while it sits in L1; the rows stay in L1 or L2 (a few KiB each). Such a
//! weight usually comes from memory, so they ask for its rows ahead of use ([`Hint`]). The
//! SIMD is `pulp`'s (the GEMM crate's own dependency): safe code, generic over the vector
//! width, dispatched at run time to AVX-512, AVX2 + FMA or scalar code.

use pulp::{Arch, Simd, WithSimd};

/// Weight rows per block of [`rows_times_wt`] (each row's dot products with a block of
/// `X_BLOCK` input rows in registers: 4 × 4 accumulators, 8 loads for 16 FMAs; blocks of
/// 2 and 1 rows take the rest): 4 × 4 is the widest block whose accumulators and loads
/// fit the vector registers, and each weight row loaded serves four input rows.
const W_BLOCK: usize = 4;
const X_BLOCK: usize = 4;
/// Input gradient rows per block of [`rows_times_w`], and SIMD vectors per column strip
/// (4 × 4 accumulators, 4 loads and 4 broadcasts for 16 FMAs; narrower blocks and strips
/// take the rest): the widest block that stays in registers, so each load of `W` feeds as
/// many FMAs as it can.
const DY_BLOCK: usize = 4;
const STRIP: usize = 4;
/// How far ahead of the rows in use the kernels ask for the weight's rows (software
/// prefetch): a block of 4 rows in the forward, the rows of a column strip in the input
/// gradient (a few cycles each, so further ahead). Chosen on a 256 → 256 weight, 8 and 16
/// rows, 512 weights cycled (from memory, as a 64-expert MoE's 32 MiB of weights come in
/// training): see [`Hint`].
const FORWARD_AHEAD: usize = 8;
const GRADIENT_AHEAD: usize = 16;
/// Input rows per block of [`add_outer_rows`] (per vector of the weight row: its load and
/// store, 4 loads of the rows and 4 FMAs; blocks of 2 and 1 take the rest), and the weight
/// rows ahead it asks for. Blocks of 2 or 4 weight rows as well were slower (spills).
const OUTER_BLOCK: usize = 4;
const OUTER_AHEAD: usize = 4;

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
    Arch::new().dispatch(DotRows { x, w, y, inp, out });
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
    Arch::new().dispatch(AxpyRows { dy, w, dx, inp, out });
}

/// `W += aᵀ x` for `a: [rows, out]`, `x: [rows, inp]`, `W: [out, inp]`, row-major: the
/// weight-gradient product of a few rows, added in one pass over `W` (into a gradient
/// accumulator, or straight into the weight for a plain SGD step).
///
/// # Panics
/// When the lengths do not fit `inp` and `out`.
pub fn add_outer_rows(a: &[f32], x: &[f32], w: &mut [f32], inp: usize, out: usize) {
    let rows = a.len().checked_div(out).unwrap_or(0);
    assert!(a.len() == rows * out && x.len() == rows * inp && w.len() == out * inp, "add_outer_rows: shapes differ");
    if rows == 0 || out == 0 || inp == 0 {
        return;
    }
    Arch::new().dispatch(OuterRows { a, x, w, inp, out });
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
    w: &'a [f32],
    y: &'a mut [f32],
    inp: usize,
    out: usize,
}

impl WithSimd for DotRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let DotRows { x, w, y, inp, out } = self;
        let rows = x.len() / inp;
        let (wide, hint) = (Wide::of::<S>(), Hint::new());
        let mut o = 0;
        // A block of weight rows against every input row, then the next block.
        while o < out {
            let block = if out - o >= W_BLOCK { W_BLOCK } else { 1 };
            let mut r = 0;
            while r < rows {
                let pair = step(rows - r, X_BLOCK);
                match (block, pair) {
                    (W_BLOCK, X_BLOCK) => dots::<S, W_BLOCK, X_BLOCK>(simd, wide, hint, w, x, y, inp, out, o, r),
                    (W_BLOCK, 2) => dots::<S, W_BLOCK, 2>(simd, wide, hint, w, x, y, inp, out, o, r),
                    (W_BLOCK, _) => dots::<S, W_BLOCK, 1>(simd, wide, hint, w, x, y, inp, out, o, r),
                    (_, X_BLOCK) => dots::<S, 1, X_BLOCK>(simd, wide, hint, w, x, y, inp, out, o, r),
                    (_, 2) => dots::<S, 1, 2>(simd, wide, hint, w, x, y, inp, out, o, r),
                    _ => dots::<S, 1, 1>(simd, wide, hint, w, x, y, inp, out, o, r),
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
    wide: Wide,
    hint: Hint,
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
        if r == 0 {
            // The block `FORWARD_AHEAD` rows on, a line of each row per step.
            for j in 0..WB {
                hint.line(w.as_ptr().wrapping_add((o + FORWARD_AHEAD + j) * inp + c * S::F32_LANES));
            }
        }
        let xs: [S::f32s; XB] = std::array::from_fn(|k| x_rows[k].0[c]);
        for (acc_j, (w_row, _)) in acc.iter_mut().zip(&w_rows) {
            let wv = w_row[c];
            for (a, &xv) in acc_j.iter_mut().zip(&xs) {
                *a = simd.mul_add_e_f32s(wv, xv, *a);
            }
        }
    }
    if inp.is_multiple_of(S::F32_LANES)
        && wide.add_block::<S, WB, XB>(acc, y, std::array::from_fn(|k| (r + k) * out + o))
    {
        return;
    }
    for (j, (_, w_tail)) in w_rows.iter().enumerate() {
        for (k, (_, x_tail)) in x_rows.iter().enumerate() {
            let tail: f32 = w_tail.iter().zip(*x_tail).map(|(a, b)| a * b).sum();
            y[(r + k) * out + o + j] += simd.reduce_sum_f32s(acc[j][k]) + tail;
        }
    }
}

/// The AVX-512 token when the kernel runs on its 16-lane vectors: a 4 × 4 block of
/// [`dots`] then adds up its 16 accumulators in one shuffle tree (30 shuffles and 15 adds
/// leave the 16 sums in one vector) instead of 16 horizontal sums (about 64 of each).
#[derive(Clone, Copy)]
struct Wide(#[cfg(target_arch = "x86_64")] Option<pulp::x86::V4>);

impl Wide {
    #[inline(always)]
    fn of<S: Simd>() -> Wide {
        #[cfg(target_arch = "x86_64")]
        {
            Wide(if S::F32_LANES == 16 { pulp::x86::V4::try_new() } else { None })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Wide()
        }
    }

    /// Adds a block's dot products to `y` (`acc[j][k]` to `y[at[k] + j]`) when the block is
    /// 4 × 4 on AVX-512: the shuffle tree leaves row `k`'s four sums in quarter `k` of one
    /// vector, added to `y` four at a time. The accumulators come by value, so they stay in
    /// registers (by reference they would go through the stack, a store per accumulator per
    /// block). False (nothing done) otherwise.
    #[inline(always)]
    fn add_block<S: Simd, const WB: usize, const XB: usize>(
        self,
        acc: [[S::f32s; XB]; WB],
        y: &mut [f32],
        at: [usize; XB],
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if let (Some(v4), 4, 4) = (self.0, WB, XB) {
            use core::arch::x86_64::{__m128, __m512};
            use pulp::bytemuck::{cast, try_cast};
            let f = v4.avx512f;
            let mut a = [f._mm512_setzero_ps(); 16];
            for (n, slot) in a.iter_mut().enumerate() {
                let Ok(v) = try_cast::<S::f32s, __m512>(acc[n / XB][n % XB]) else { return false };
                *slot = v;
            }
            // Accumulator n = 4j + k. Each level adds pairs of halves: 256-bit halves
            // (two accumulators a vector), 128-bit quarters (four), then pairs and single
            // lanes within each quarter, which ends with quarter k holding the sums of
            // acc[0..4][k].
            let l1: [__m512; 8] = std::array::from_fn(|m| {
                let (p, q) = (a[2 * m], a[2 * m + 1]);
                f._mm512_add_ps(f._mm512_shuffle_f32x4::<0x44>(p, q), f._mm512_shuffle_f32x4::<0xEE>(p, q))
            });
            let l2: [__m512; 4] = std::array::from_fn(|m| {
                let (p, q) = (l1[2 * m], l1[2 * m + 1]);
                f._mm512_add_ps(f._mm512_shuffle_f32x4::<0x88>(p, q), f._mm512_shuffle_f32x4::<0xDD>(p, q))
            });
            let l3: [__m512; 2] = std::array::from_fn(|m| {
                let (p, q) = (l2[2 * m], l2[2 * m + 1]);
                f._mm512_add_ps(f._mm512_shuffle_ps::<0x44>(p, q), f._mm512_shuffle_ps::<0xEE>(p, q))
            });
            let (p, q) = (l3[0], l3[1]);
            let l4 = f._mm512_add_ps(f._mm512_shuffle_ps::<0x88>(p, q), f._mm512_shuffle_ps::<0xDD>(p, q));
            let quarters = [
                f._mm512_extractf32x4_ps::<0>(l4),
                f._mm512_extractf32x4_ps::<1>(l4),
                f._mm512_extractf32x4_ps::<2>(l4),
                f._mm512_extractf32x4_ps::<3>(l4),
            ];
            for (quarter, &start) in quarters.into_iter().zip(&at) {
                let to = &mut y[start..start + 4];
                let sum = v4.sse._mm_add_ps(cast::<[f32; 4], __m128>([to[0], to[1], to[2], to[3]]), quarter);
                to.copy_from_slice(&cast::<__m128, [f32; 4]>(sum));
            }
            return true;
        }
        let _ = (acc, y, at);
        false
    }
}

/// Software prefetches on x86 (`prefetcht0` through `pulp`'s safe wrapper). A weight these
/// kernels read once per batch comes from L3 or memory (a 64-expert MoE's weights are 32
/// MiB, each read once per few hundred instances), and reading 4 rows at a time, or a
/// strip of every row, is an access pattern the hardware prefetchers do not follow, so
/// without hints the kernels wait for memory.
#[derive(Clone, Copy)]
struct Hint(#[cfg(target_arch = "x86_64")] Option<pulp::x86::V3>);

impl Hint {
    fn new() -> Hint {
        #[cfg(target_arch = "x86_64")]
        {
            Hint(pulp::x86::V3::try_new())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Hint()
        }
    }

    /// Asks for the cache line at `p`. A prefetch never faults and reads nothing into the
    /// program, so `p` may point anywhere (past a weight's last row, say); callers compute
    /// it with `wrapping_add`, which is defined whatever it reaches.
    #[inline(always)]
    fn line(self, p: *const f32) {
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = self.0 {
            v3.sse._mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

struct AxpyRows<'a> {
    dy: &'a [f32],
    w: &'a [f32],
    dx: &'a mut [f32],
    inp: usize,
    out: usize,
}

impl WithSimd for AxpyRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let AxpyRows { dy, w, dx, inp, out } = self;
        let rows = dy.len() / out;
        let vectors = inp / S::F32_LANES;
        let hint = Hint::new();
        // A strip of the weight's columns (all its rows: out × 4 vectors, 32 KiB for 256
        // rows of AVX2 vectors) against every gradient row, then the next strip.
        let mut c = 0;
        while c < vectors {
            let width = step(vectors - c, STRIP);
            let mut r = 0;
            while r < rows {
                let block = step(rows - r, DY_BLOCK);
                match (block, width) {
                    (DY_BLOCK, STRIP) => axpys::<S, DY_BLOCK, STRIP>(simd, hint, dy, w, dx, inp, out, r, c),
                    (DY_BLOCK, 2) => axpys::<S, DY_BLOCK, 2>(simd, hint, dy, w, dx, inp, out, r, c),
                    (DY_BLOCK, _) => axpys::<S, DY_BLOCK, 1>(simd, hint, dy, w, dx, inp, out, r, c),
                    (2, STRIP) => axpys::<S, 2, STRIP>(simd, hint, dy, w, dx, inp, out, r, c),
                    (2, 2) => axpys::<S, 2, 2>(simd, hint, dy, w, dx, inp, out, r, c),
                    (2, _) => axpys::<S, 2, 1>(simd, hint, dy, w, dx, inp, out, r, c),
                    (_, STRIP) => axpys::<S, 1, STRIP>(simd, hint, dy, w, dx, inp, out, r, c),
                    (_, 2) => axpys::<S, 1, 2>(simd, hint, dy, w, dx, inp, out, r, c),
                    _ => axpys::<S, 1, 1>(simd, hint, dy, w, dx, inp, out, r, c),
                }
                r += block;
            }
            c += width;
        }
        // The columns past the last whole vector, as one partial vector per row.
        let first = vectors * S::F32_LANES;
        if first < inp {
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

struct OuterRows<'a> {
    a: &'a [f32],
    x: &'a [f32],
    w: &'a mut [f32],
    inp: usize,
    out: usize,
}

impl WithSimd for OuterRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let OuterRows { a, x, w, inp, out } = self;
        let rows = x.len() / inp;
        let hint = Hint::new();
        // Row by row of the weight (it stays in L1 while blocks of 4 input rows pass over
        // it), asking for the row `OUTER_AHEAD` on.
        for o in 0..out {
            let ahead = w.as_ptr().wrapping_add((o + OUTER_AHEAD) * inp);
            let w_row = &mut w[o * inp..][..inp];
            let mut r = 0;
            while r < rows {
                let block = step(rows - r, OUTER_BLOCK);
                match block {
                    OUTER_BLOCK => outer::<S, OUTER_BLOCK>(simd, hint, ahead, a, x, w_row, inp, out, o, r),
                    2 => outer::<S, 2>(simd, hint, ahead, a, x, w_row, inp, out, o, r),
                    _ => outer::<S, 1>(simd, hint, ahead, a, x, w_row, inp, out, o, r),
                }
                r += block;
            }
        }
    }
}

/// `w_row += Σ_k a[r + k][o] x[r + k]` for `k < RB`, asking for the line of `ahead` a
/// step on during the first block.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn outer<S: Simd, const RB: usize>(
    simd: S,
    hint: Hint,
    ahead: *const f32,
    a: &[f32],
    x: &[f32],
    w_row: &mut [f32],
    inp: usize,
    out: usize,
    o: usize,
    r: usize,
) {
    let scales: [S::f32s; RB] = std::array::from_fn(|k| simd.splat_f32s(a[(r + k) * out + o]));
    let x_rows: [(&[S::f32s], &[f32]); RB] = std::array::from_fn(|k| S::as_simd_f32s(&x[(r + k) * inp..][..inp]));
    let (head, tail) = S::as_mut_simd_f32s(w_row);
    for (c, to) in head.iter_mut().enumerate() {
        if r == 0 {
            hint.line(ahead.wrapping_add(c * S::F32_LANES));
        }
        let mut acc = *to;
        for (scale, (x_row, _)) in scales.iter().zip(&x_rows) {
            acc = simd.mul_add_e_f32s(*scale, x_row[c], acc);
        }
        *to = acc;
    }
    if !tail.is_empty() {
        let mut acc = simd.partial_load_f32s(tail);
        for (scale, (_, x_tail)) in scales.iter().zip(&x_rows) {
            acc = simd.mul_add_e_f32s(*scale, simd.partial_load_f32s(x_tail), acc);
        }
        simd.partial_store_f32s(tail, acc);
    }
}

/// `dx[r + k][cols] += Σ_o dy[r + k][o] W[o][cols]` for `k < RB` over the `V` vectors of
/// columns from vector `c`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn axpys<S: Simd, const RB: usize, const V: usize>(
    simd: S,
    hint: Hint,
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
        if r == 0 {
            // The strip of the row `GRADIENT_AHEAD` rows on.
            for v in 0..V {
                hint.line(w.as_ptr().wrapping_add((o + GRADIENT_AHEAD) * inp + first + v * S::F32_LANES));
            }
        }
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
    /// leave every kind of remainder; the results add to what `y`, `dx` and `W` held.
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
            let mut w1 = w.clone();
            add_outer_rows(&dy, &x, &mut w1, inp, out);
            for o in 0..out {
                for i in 0..inp {
                    let want = w[o * inp + i] + (0..rows).map(|r| dy[r * out + o] * x[r * inp + i]).sum::<f32>();
                    let got = w1[o * inp + i];
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()) * rows as f32,
                        "W {rows}×{inp}→{out} ({o}, {i}): {got} vs {want}"
                    );
                }
            }
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

    #[test]
    fn empty_shapes_do_nothing() {
        let mut y = vec![1.0; 3];
        rows_times_wt(&[], &[0.0; 12], &mut [], 4, 3);
        rows_times_w(&[], &[0.0; 12], &mut [], 4, 3);
        let mut w = vec![1.0; 12];
        add_outer_rows(&[], &[], &mut w, 4, 3);
        assert_eq!(w, vec![1.0; 12]);
        rows_times_wt(&[1.0; 0], &[], &mut y[..0], 0, 3);
        assert_eq!(y, vec![1.0; 3]);
    }
}
