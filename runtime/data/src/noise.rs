//! A static input shown for several frames with fresh Gaussian noise in each: the
//! response-time setup of a rolled-out network (docs/rollouts.md, `amprun --frame-noise`).
//!
//! The noise of an instance depends on a seed and the instance's index only (ChaCha8, as
//! the generators use), so that a run is reproducible and an instance's frames do not
//! depend on which other instances were read with it. Within an instance each frame draws
//! its own noise.

use crate::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// The seed of instance `index`'s noise under the run's `seed`: the two mixed
/// (SplitMix64's finaliser), so that neighbouring seeds and indices give unrelated streams.
pub fn instance_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index.wrapping_add(0x6A09_E667_F3BC_C909);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `count` frames of `frame`, each plus its own noise of standard deviation `sigma` drawn
/// from `seed` (with `sigma` 0, `count` copies of `frame`).
pub fn noisy_frames(frame: &Tensor, count: usize, sigma: f32, seed: u64) -> Vec<Tensor> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let data = frame
                .data
                .iter()
                .map(|&x| {
                    let n: f32 = StandardNormal.sample(&mut rng);
                    if sigma == 0.0 {
                        x
                    } else {
                        x + sigma * n
                    }
                })
                .collect();
            Tensor { shape: frame.shape.clone(), data }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Tensor {
        Tensor { shape: vec![4], data: vec![0.0, 1.0, 2.0, 3.0] }
    }

    #[test]
    fn the_same_seed_gives_the_same_frames() {
        let a = noisy_frames(&frame(), 3, 0.5, instance_seed(7, 2));
        let b = noisy_frames(&frame(), 3, 0.5, instance_seed(7, 2));
        assert_eq!(a, b);
        let other_instance = noisy_frames(&frame(), 3, 0.5, instance_seed(7, 3));
        let other_seed = noisy_frames(&frame(), 3, 0.5, instance_seed(8, 2));
        assert_ne!(a, other_instance);
        assert_ne!(a, other_seed);
    }

    #[test]
    fn each_frame_has_its_own_noise() {
        let frames = noisy_frames(&frame(), 3, 0.5, 1);
        assert_eq!(frames.len(), 3);
        assert_ne!(frames[0], frames[1]);
        assert_ne!(frames[1], frames[2]);
        assert!(frames.iter().all(|f| f.shape == vec![4] && f.data.iter().all(|x| x.is_finite())));
    }

    #[test]
    fn no_noise_repeats_the_input() {
        let frames = noisy_frames(&frame(), 4, 0.0, 9);
        assert!(frames.iter().all(|f| *f == frame()));
    }

    #[test]
    fn the_noise_has_the_standard_deviation_asked_for() {
        let zeros = Tensor { shape: vec![1000], data: vec![0.0; 1000] };
        let frames = noisy_frames(&zeros, 10, 2.0, 5);
        let values: Vec<f64> = frames.iter().flat_map(|f| f.data.iter().map(|&x| f64::from(x))).collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let var = values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / values.len() as f64;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.1, "std {}", var.sqrt());
    }
}
