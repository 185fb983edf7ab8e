//! Dropout's masks, shared by the executor and the reference evaluator so that both drop
//! the same units.
//!
//! A mask is a pure function of words that every execution of a `dropout` can name
//! without asking anyone: the run's seed, the instance (its index in the data set and the
//! epoch), the dropout *site* (where the call is written in the source), and the values
//! of the state fields of its dynamic context (loop counters, collection elements, tree
//! nodes; [`crate::Op::Dropout`]'s `context`). Each element's keep/drop decision hashes
//! those words and its own index with SplitMix64's finaliser, a counter-based generator:
//! no stream is shared, so the order in which workers, batches or fused kernels reach a
//! site cannot change a mask.

/// Which training pass of which instance a mask belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DropoutRun {
    /// The run's seed (`amprun --seed`).
    pub seed: u64,
    /// The epoch (counting from 0), so that an instance is masked anew each epoch.
    pub epoch: u64,
    /// The instance's index in its data set (not its position in a shuffled epoch).
    pub instance: u64,
}

/// SplitMix64's output function: a bijection of u64 whose outputs pass as independent for
/// inputs that differ in a few bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The site of a `dropout` call: its source file's index and the byte where the call
/// starts, the same for the compiler (which lowers the call) and the reference (which
/// evaluates it).
pub fn site(file: u32, start: u32) -> u64 {
    (u64::from(file) << 32) | u64::from(start)
}

/// The scale of a kept unit under inverted dropout at rate `p`: `1 / (1 - p)`, so that
/// the expected output equals the input and evaluation needs no rescaling.
pub fn keep_scale(p: f32) -> f32 {
    1.0 / (1.0 - p)
}

/// Whether `p` is a rate dropout accepts: in `[0, 1)` (1 would drop everything and scale
/// by infinity).
pub fn valid_rate(p: f32) -> bool {
    (0.0..1.0).contains(&p)
}

/// The multiplier of each of `len` elements: `keep_scale(p)` for a kept unit, 0 for a
/// dropped one. Element `i` is kept when the top 24 bits of its hash, as a fraction of
/// 2^24 (exact in f32), are at least `p`.
pub fn mask(run: &DropoutRun, site: u64, context: &[i64], p: f32, len: usize) -> Vec<f32> {
    let mut h = mix(run.seed);
    for word in [run.epoch, run.instance, site] {
        h = mix(h ^ word);
    }
    for &word in context {
        h = mix(h ^ word as u64);
    }
    let scale = keep_scale(p);
    (0..len as u64)
        .map(|i| {
            let u = (mix(h ^ i) >> 40) as f32 / (1u64 << 24) as f32;
            if u >= p {
                scale
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: DropoutRun = DropoutRun { seed: 1, epoch: 0, instance: 3 };

    #[test]
    fn a_mask_depends_on_every_word() {
        let base = mask(&RUN, 7, &[2, 5], 0.5, 256);
        assert_eq!(base, mask(&RUN, 7, &[2, 5], 0.5, 256), "a mask is a function of its words");
        let others = [
            mask(&DropoutRun { seed: 2, ..RUN }, 7, &[2, 5], 0.5, 256),
            mask(&DropoutRun { epoch: 1, ..RUN }, 7, &[2, 5], 0.5, 256),
            mask(&DropoutRun { instance: 4, ..RUN }, 7, &[2, 5], 0.5, 256),
            mask(&RUN, 8, &[2, 5], 0.5, 256),
            mask(&RUN, 7, &[2, 6], 0.5, 256),
            mask(&RUN, 7, &[5, 2], 0.5, 256),
        ];
        for other in others {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn kept_units_are_scaled_and_the_rate_is_respected() {
        for p in [0.1f32, 0.3, 0.5, 0.9] {
            let m = mask(&RUN, 1, &[], p, 20_000);
            let kept = m.iter().filter(|&&x| x != 0.0).count() as f32 / m.len() as f32;
            assert!((kept - (1.0 - p)).abs() < 0.02, "p = {p}: kept {kept}");
            assert!(m.iter().all(|&x| x == 0.0 || x == keep_scale(p)));
        }
        assert!(mask(&RUN, 1, &[], 0.0, 1000).iter().all(|&x| x == 1.0), "p = 0 keeps everything as it is");
    }

    #[test]
    fn rates_outside_zero_to_one_are_refused() {
        assert!(valid_rate(0.0) && valid_rate(0.5) && valid_rate(0.999));
        assert!(!valid_rate(1.0) && !valid_rate(-0.1) && !valid_rate(f32::NAN) && !valid_rate(f32::INFINITY));
    }
}
