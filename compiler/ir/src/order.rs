//! The order of a vector's values, for every stage that picks by value: `argmax` and
//! `top_k` in the executor's routing, the reference evaluator's, accuracy, and `amprun
//! infer`'s `argmax`. Largest first, the lower index first among equals, NaN after every
//! number, and IEEE-equal values (`-0.0` and `0.0`) equal.

use std::cmp::Ordering;

/// Orders values largest first, NaN after every number; IEEE-equal values compare equal.
pub fn larger_first(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
    }
}

/// The index of the largest value in [`larger_first`] order, the lowest among equals: NaN
/// never wins over a number, and an all-NaN vector gives 0. `None` when empty.
pub fn argmax(x: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &v) in x.iter().enumerate() {
        match best {
            Some(b) if larger_first(v, x[b]) != Ordering::Less => {}
            _ => best = Some(i),
        }
    }
    best
}

/// Up to this `k`, [`top_k_order`] keeps its best in a sorted list while scanning.
const SMALL_K: usize = 8;

/// The indices of the `k` largest values (all of them when `k` exceeds the length),
/// largest first, in [`larger_first`] order with the lower index first among equals.
///
/// The `k` first are selected in linear time and only they are sorted (a gate picks a few
/// of many for every instance, so sorting them all would be wasted); a small `k` keeps
/// its `k` best in order in one pass, cheaper than partitioning.
pub fn top_k_order(x: &[f32], k: usize) -> Vec<usize> {
    let first = |a: &usize, b: &usize| larger_first(x[*a], x[*b]).then(a.cmp(b));
    if k <= SMALL_K && k < x.len() {
        let mut best: Vec<usize> = Vec::with_capacity(k + 1);
        for i in 0..x.len() {
            if best.len() == k && best.last().is_none_or(|last| first(&i, last) != Ordering::Less) {
                continue;
            }
            let at = best.partition_point(|b| first(b, &i) == Ordering::Less);
            best.insert(at, i);
            best.truncate(k);
        }
        return best;
    }
    let mut order: Vec<usize> = (0..x.len()).collect();
    if k < order.len() {
        if let Some(last) = k.checked_sub(1) {
            order.select_nth_unstable_by(last, first);
        }
        order.truncate(k);
    }
    order.sort_unstable_by(first);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_orders_ties_by_index_and_nan_last() {
        let x = [1.0, f32::NAN, 3.0, 3.0, -0.0, 0.0];
        assert_eq!(top_k_order(&x, 4), vec![2, 3, 0, 4]);
        assert_eq!(top_k_order(&x, 9), vec![2, 3, 0, 4, 5, 1]);
        assert_eq!(argmax(&x), Some(2));
        assert_eq!(argmax(&[f32::NAN, -1.0]), Some(1));
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), Some(0));
        assert_eq!(argmax(&[0.0, -0.0]), Some(0));
        assert_eq!(argmax(&[]), None);
    }

    #[test]
    fn selection_is_the_head_of_the_full_order() {
        // Few distinct values (many ties), signed zeros and NaN among them.
        let pool = [2.0, -1.0, 0.0, -0.0, f32::NAN, 7.5, 2.0];
        for n in 0..40 {
            let x: Vec<f32> = (0..n).map(|i| pool[(i * 5 + n) % pool.len()]).collect();
            let mut full: Vec<usize> = (0..n).collect();
            full.sort_by(|&a, &b| larger_first(x[a], x[b]).then(a.cmp(&b)));
            for k in 0..=n + 1 {
                assert_eq!(top_k_order(&x, k), full[..k.min(n)], "n {n}, k {k}");
            }
            assert_eq!(argmax(&x), full.first().copied(), "n {n}");
        }
    }
}
