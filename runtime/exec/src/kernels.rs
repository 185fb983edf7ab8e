//! The dense math of the ops, on row-major slices. Plain loops the compiler vectorizes;
//! the GEMM crate and the JIT replace them later behind the same signatures.

use std::cmp::Ordering;

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

/// `y = x W^T + b` for `x: [rows, inp]`, `W: [out, inp]`, `b: [out]`.
pub fn linear_forward(x: &[f32], w: &[f32], b: &[f32], inp: usize, out: usize) -> Vec<f32> {
    let rows = x.len().checked_div(inp).unwrap_or(0);
    let mut y = Vec::with_capacity(rows * out);
    for r in 0..rows {
        let xr = &x[r * inp..(r + 1) * inp];
        for o in 0..out {
            y.push(b[o] + dot(&w[o * inp..(o + 1) * inp], xr));
        }
    }
    y
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
    let rows = dy.len().checked_div(out).unwrap_or(0);
    let mut dx = vec![0.0; rows * inp];
    for r in 0..rows {
        let xr = &x[r * inp..(r + 1) * inp];
        let dyr = &dy[r * out..(r + 1) * out];
        let dxr = &mut dx[r * inp..(r + 1) * inp];
        for (o, &g) in dyr.iter().enumerate() {
            if g == 0.0 {
                continue;
            }
            axpy(g, &w[o * inp..(o + 1) * inp], dxr);
            axpy(g, xr, &mut dw[o * inp..(o + 1) * inp]);
            db[o] += g;
        }
    }
    dx
}

/// Softmax over each row of `width` values.
pub fn softmax_rows(x: &[f32], width: usize) -> Vec<f32> {
    let mut y = x.to_vec();
    if width == 0 {
        return y;
    }
    for row in y.chunks_mut(width) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        row.iter_mut().for_each(|v| *v /= sum);
    }
    y
}

/// Log-softmax over each row of `width` values.
pub fn log_softmax_rows(x: &[f32], width: usize) -> Vec<f32> {
    let mut y = x.to_vec();
    if width == 0 {
        return y;
    }
    for row in y.chunks_mut(width) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        // (x - max) - log(sum): exact shifts first, as PyTorch does, so large logits keep
        // their precision.
        let log_sum = row.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
        row.iter_mut().for_each(|v| *v = (*v - max) - log_sum);
    }
    y
}

/// The index of the largest value (the first of equals); `None` when empty or NaN-only.
pub fn argmax(x: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in x.iter().enumerate() {
        let better = match best {
            Some((_, b)) => v > b,
            None => !v.is_nan(),
        };
        if better {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

/// Orders values largest first, NaN after every number; IEEE-equal values (`-0.0` and
/// `0.0`) compare equal. The order of `top_k` and `state_from_payload`, as the reference
/// evaluator's.
pub fn larger_first(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
    }
}

/// The indices of the `k` largest values (all of them when `k` exceeds the length),
/// largest first, the lower index first among equals, NaN last.
pub fn top_k_order(x: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_unstable_by(|&a, &b| larger_first(x[a], x[b]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

/// The index of the largest value in [`larger_first`] order, the lowest among equals:
/// NaN never wins over a number, and an all-NaN vector gives 0. `None` when empty.
pub fn argmax_nan_last(x: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &v) in x.iter().enumerate() {
        match best {
            Some(b) if larger_first(v, x[b]) != Ordering::Less => {}
            _ => best = Some(i),
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_matches_naive() {
        let x = [1.0, 2.0, 3.0, -1.0, 0.5, 2.0];
        let w: Vec<f32> = (0..12).map(|i| i as f32 * 0.1 - 0.5).collect();
        let b = [0.1, 0.2, 0.3, 0.4];
        let y = linear_forward(&x, &w, &b, 3, 4);
        for r in 0..2 {
            for o in 0..4 {
                let expected: f32 = b[o] + (0..3).map(|i| w[o * 3 + i] * x[r * 3 + i]).sum::<f32>();
                assert!((y[r * 4 + o] - expected).abs() < 1e-6);
            }
        }
        let dy: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
        let (mut dw, mut db) = (vec![0.0; 12], vec![0.0; 4]);
        let dx = linear_backward(&x, &dy, &w, &mut dw, &mut db, 3, 4);
        for r in 0..2 {
            for i in 0..3 {
                let expected: f32 = (0..4).map(|o| dy[r * 4 + o] * w[o * 3 + i]).sum();
                assert!((dx[r * 3 + i] - expected).abs() < 1e-5);
            }
        }
        let expected_dw: f32 = (0..2).map(|r| dy[r * 4 + 1] * x[r * 3 + 2]).sum();
        assert!((dw[5] - expected_dw).abs() < 1e-5);
        assert!((db[0] - (dy[0] + dy[4])).abs() < 1e-6);
    }

    #[test]
    fn softmaxes_are_stable_and_agree() {
        let x = [1000.0, 1001.0, 999.0];
        let s = softmax_rows(&x, 3);
        let l = log_softmax_rows(&x, 3);
        assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        for (a, b) in s.iter().zip(&l) {
            assert!((a.ln() - b).abs() < 1e-5);
        }
        assert_eq!(argmax(&x), Some(1));
        assert_eq!(argmax(&[f32::NAN, 1.0]), Some(1));
        assert_eq!(argmax(&[]), None);
    }

    #[test]
    fn selection_orders_ties_by_index_and_nan_last() {
        let x = [1.0, f32::NAN, 3.0, 3.0, -0.0, 0.0];
        assert_eq!(top_k_order(&x, 4), vec![2, 3, 0, 4]);
        assert_eq!(top_k_order(&x, 9), vec![2, 3, 0, 4, 5, 1]);
        assert_eq!(argmax_nan_last(&x), Some(2));
        assert_eq!(argmax_nan_last(&[f32::NAN, -1.0]), Some(1));
        assert_eq!(argmax_nan_last(&[f32::NAN, f32::NAN]), Some(0));
        assert_eq!(argmax_nan_last(&[]), None);
    }
}
