//! The one door to the GEMM crate (`gemm` 0.19 with its AVX-512 `x86-v4` kernels, chosen
//! over `matrixmultiply` 0.3 and the former hand loops by `cargo bench -p amp-benches
//! --bench gemm`). Its entry point takes raw pointers and strides; [`matmul`] (into a
//! slice) and [`matmul_new`] (into a new vector, written once) take shapes, check that
//! every element they name lies inside its slice, and are the only places of the executor
//! that call it (through `product`), single-threaded (a worker is one thread).

use super::PANEL;
use gemm::{gemm, Parallelism};

/// A read-only matrix view: `rows × cols` elements, element `(r, c)` at
/// `data[r * row_stride + c * col_stride]`. Row-major storage has `col_stride` 1; a
/// transposed view of it swaps the strides, so no product needs a copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// `data` read as a row-major `rows × cols` matrix.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Mat<'a> {
        Mat { data, rows, cols, row_stride: cols, col_stride: 1 }
    }

    /// The transpose, as a view of the same data.
    pub fn t(self) -> Mat<'a> {
        Mat { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    /// Whether every element the view names lies inside `data`.
    fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|r| (self.cols - 1).checked_mul(self.col_stride).and_then(|c| r.checked_add(c)));
        last.is_some_and(|last| last < self.data.len())
    }
}

/// `dst = lhs · rhs`, or `dst += lhs · rhs` with `accumulate`; `dst` is row-major
/// `lhs.rows × rhs.cols`.
///
/// # Panics
/// When the shapes disagree or a view reaches past its slice: a caller's bug (the ops
/// check payload sizes against the port types first), which the worker reports as a
/// panic of the node.
// The `unsafe` of this crate is its one door to gemm (`product`), audited there (SAFETY).
#[allow(unsafe_code)]
pub(crate) fn matmul(dst: &mut [f32], lhs: Mat, rhs: Mat, accumulate: bool) {
    let (m, k, n) = check(lhs, rhs);
    assert_eq!(Some(dst.len()), m.checked_mul(n), "matmul: the destination is not {m}×{n}");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return;
    }
    // SAFETY: `dst` holds the m×n elements, a unique borrow; shapes checked, none empty.
    unsafe { product(dst.as_mut_ptr(), lhs, rhs, accumulate) }
}

/// `lhs · rhs` in a new row-major buffer that the GEMM writes once: no zeros written
/// first for it to overwrite (a backward's input gradient, the size of its batch).
///
/// # Panics
/// As [`matmul`]'s; also when the product's size overflows.
#[allow(unsafe_code)]
pub(crate) fn matmul_new(lhs: Mat, rhs: Mat) -> Vec<f32> {
    let (m, k, n) = check(lhs, rhs);
    let len = m.checked_mul(n).expect("matmul: the product's size overflows");
    if len == 0 || k == 0 {
        return vec![0.0; len];
    }
    let mut dst = Vec::with_capacity(len);
    // SAFETY: the room of `dst` holds m×n elements and is no other slice's; shapes
    // checked, none empty. Not accumulating, the product stores every one of the m×n
    // elements (its column ranges cover `0..n` in every row) without reading any, so the
    // vector then holds `len` initialised values.
    unsafe {
        product(dst.spare_capacity_mut().as_mut_ptr().cast(), lhs, rhs, false);
        dst.set_len(len);
    }
    dst
}

/// Checks that the operands' shapes agree and that their views lie inside their slices;
/// `(m, k, n)`.
fn check(lhs: Mat, rhs: Mat) -> (usize, usize, usize) {
    assert_eq!(rhs.rows, lhs.cols, "matmul: inner dimensions {} and {} differ", lhs.cols, rhs.rows);
    assert!(lhs.in_bounds() && rhs.in_bounds(), "matmul: an operand view reaches past its slice");
    (lhs.rows, lhs.cols, rhs.cols)
}

/// `dst = lhs · rhs`, or `+=` with `accumulate`, through the GEMM crate.
///
/// # Safety
/// `dst` points to room for `lhs.rows × rhs.cols` f32 (row-major), initialised where
/// `accumulate` reads it, that nothing else reads or writes meanwhile; the operands passed
/// [`check`], and none of m, k, n is 0.
#[allow(unsafe_code)]
unsafe fn product(dst: *mut f32, lhs: Mat, rhs: Mat, accumulate: bool) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    // The crate computes a row-major product as its transpose, with our columns as its
    // rows, and copies ("packs") the whole of `rhs` at every call unless their count is a
    // multiple of its 16 lanes: Tree-LSTM's 750 and 450 outputs made it pack the weight for
    // every batch (a tenth of the training time). The columns up to the last multiple of 16
    // go in one call, the rest in a second, small one. (The Linear op's products of
    // several rows do better still on weight copies padded to a multiple: `super::PANEL`.)
    let split = if n > PANEL && n % PANEL != 0 { n / PANEL * PANEL } else { n };
    for (first, cols) in [(0, split), (split, n - split)] {
        if cols == 0 {
            continue;
        }
        // SAFETY: `dst` has room for exactly m×n elements, row-major (row stride n, column
        // stride 1), and columns `first..first + cols` of it start `first` elements in;
        // `in_bounds` checked that every element (r, c) of `lhs` (m×k) and `rhs` (k×n) lies
        // inside its slice, so column `first` of `rhs` starts `first * col_stride` elements
        // in and no pointer offset leaves an allocation; all strides fit in isize because
        // they index slices. Nothing else touches `dst` (the caller's contract), so it
        // aliases neither operand.
        // `Parallelism::None` runs on this thread only; with `read_dst` false the crate
        // writes `dst` without reading it (alpha is ignored).
        unsafe {
            gemm(
                m,
                cols,
                k,
                dst.add(first),
                1,
                n as isize,
                accumulate,
                lhs.data.as_ptr(),
                lhs.col_stride as isize,
                lhs.row_stride as isize,
                rhs.data.as_ptr().add(first * rhs.col_stride),
                rhs.col_stride as isize,
                rhs.row_stride as isize,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(lhs: Mat, rhs: Mat) -> Vec<f32> {
        let at = |m: &Mat, r: usize, c: usize| m.data[r * m.row_stride + c * m.col_stride];
        let mut out = Vec::new();
        for r in 0..lhs.rows {
            for c in 0..rhs.cols {
                out.push((0..lhs.cols).map(|i| at(&lhs, r, i) * at(&rhs, i, c)).sum());
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    #[test]
    fn strided_views_match_the_naive_product() {
        for (m, k, n) in
            [(1, 1, 1), (1, 7, 3), (3, 1, 5), (5, 17, 1), (9, 33, 13), (64, 31, 70), (5, 40, 37), (16, 30, 750)]
        {
            let a = values(m * k, 1);
            let b = values(k * n, 2);
            for (lhs, rhs) in [
                (Mat::row_major(&a, m, k), Mat::row_major(&b, k, n)),
                (Mat::row_major(&a, k, m).t(), Mat::row_major(&b, n, k).t()),
            ] {
                let expected = naive(lhs, rhs);
                let mut dst = vec![f32::NAN; m * n];
                matmul(&mut dst, lhs, rhs, false);
                for (x, y) in dst.iter().zip(&expected) {
                    assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{m}×{k}×{n}: {x} vs {y}");
                }
                // Into a new buffer: the same calls, so the same bits, every element written.
                let new = matmul_new(lhs, rhs);
                assert_eq!(new.len(), m * n);
                assert!(new.iter().zip(&dst).all(|(a, b)| a.to_bits() == b.to_bits()), "{m}×{k}×{n} new");
                matmul(&mut dst, lhs, rhs, true);
                for (x, y) in dst.iter().zip(&expected) {
                    assert!((x - 2.0 * y).abs() <= 1e-5 * (1.0 + y.abs()), "{m}×{k}×{n} accumulated");
                }
            }
        }
    }

    #[test]
    fn empty_dimensions_do_nothing_or_clear() {
        let mut dst = vec![3.0; 4];
        matmul(&mut dst, Mat::row_major(&[], 2, 0), Mat::row_major(&[], 0, 2), true);
        assert_eq!(dst, vec![3.0; 4]);
        matmul(&mut dst, Mat::row_major(&[], 2, 0), Mat::row_major(&[], 0, 2), false);
        assert_eq!(dst, vec![0.0; 4]);
        let mut none: Vec<f32> = Vec::new();
        matmul(&mut none, Mat::row_major(&[], 0, 3), Mat::row_major(&[1.0; 6], 3, 2), false);
        assert_eq!(matmul_new(Mat::row_major(&[], 2, 0), Mat::row_major(&[], 0, 2)), vec![0.0; 4]);
        assert!(matmul_new(Mat::row_major(&[], 0, 3), Mat::row_major(&[1.0; 6], 3, 2)).is_empty());
    }

    #[test]
    #[should_panic(expected = "reaches past")]
    fn a_new_product_of_a_view_past_its_slice_is_refused() {
        matmul_new(Mat::row_major(&[1.0; 3], 2, 2), Mat::row_major(&[1.0; 4], 2, 2));
    }

    #[test]
    #[should_panic(expected = "reaches past")]
    fn a_view_past_its_slice_is_refused() {
        let mut dst = vec![0.0; 4];
        matmul(&mut dst, Mat::row_major(&[1.0; 3], 2, 2), Mat::row_major(&[1.0; 4], 2, 2), false);
    }
}
