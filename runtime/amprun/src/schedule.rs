//! Learning-rate schedules (`--lr-schedule`, `--warmup`): the learning rate of each epoch.
//!
//! As with PyTorch's schedulers stepped once per epoch (`scheduler.step()` after each
//! epoch, as their documentation shows), the rate is fixed within an epoch and counted in
//! epochs, so a resumed run recomputes it from the epoch number alone. With warmup `W`,
//! epoch `e ≤ W` (1-based) trains at `lr · e / (W + 1)` (PyTorch's
//! `LinearLR(start_factor = 1/(W+1), total_iters = W)`), and the schedule proper starts at
//! epoch `W + 1` with `k = e − W − 1` epochs behind it (`SequentialLR` with milestone `W`):
//!
//! - `constant`: `lr`;
//! - `step`: `lr · gamma^⌊k / step_size⌋` (`StepLR`);
//! - `cosine`: `min_lr + (lr − min_lr) · (1 + cos(π k / T)) / 2` over the `T = epochs − W`
//!   epochs after warmup (`CosineAnnealingLR(T_max = T, eta_min = min_lr)`).

use crate::cli::{ScheduleName, TrainArgs};
use crate::failure::Failure;

/// Which schedule follows the warmup.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    Constant,
    /// Multiply by `gamma` every `size` epochs.
    Step {
        size: u64,
        gamma: f32,
    },
    /// Cosine annealing from the base rate to `min_lr` over the epochs after warmup.
    Cosine {
        min_lr: f32,
    },
}

/// The learning rate of every epoch of a run of `epochs` epochs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub base: f32,
    pub warmup: u64,
    pub shape: Shape,
    pub epochs: u64,
}

impl Schedule {
    /// The learning rate of each epoch from `--lr-schedule`, `--warmup`, `--step-size`,
    /// `--gamma` and `--min-lr` (a flag of another schedule is refused: it would do nothing).
    pub fn from_args(args: &TrainArgs, lr: f32) -> Result<Schedule, Failure> {
        let stray = |flag: &str, schedule: &str| {
            Failure::usage(format!("{flag} applies to --lr-schedule {schedule}, not {}", args.lr_schedule.name()))
        };
        if args.lr_schedule != ScheduleName::Step {
            if args.step_size.is_some() {
                return Err(stray("--step-size", "step"));
            }
            if args.gamma.is_some() {
                return Err(stray("--gamma", "step"));
            }
        }
        if args.lr_schedule != ScheduleName::Cosine && args.min_lr.is_some() {
            return Err(stray("--min-lr", "cosine"));
        }
        let shape = match args.lr_schedule {
            ScheduleName::Constant => Shape::Constant,
            ScheduleName::Step => {
                let size = args
                    .step_size
                    .ok_or_else(|| Failure::usage("--lr-schedule step needs --step-size N (epochs)".to_string()))?;
                Shape::Step { size, gamma: args.gamma.unwrap_or(0.1) }
            }
            ScheduleName::Cosine => Shape::Cosine { min_lr: args.min_lr.unwrap_or(0.0) },
        };
        Schedule::new(lr, args.warmup, shape, args.epochs)
    }

    /// Checks the flags' values: rates finite and non-negative, a positive step size, a
    /// finite non-negative gamma.
    pub fn new(base: f32, warmup: u64, shape: Shape, epochs: u64) -> Result<Schedule, Failure> {
        match shape {
            Shape::Step { size: 0, .. } => return Err(Failure::usage("--step-size must be at least 1".to_string())),
            Shape::Step { gamma, .. } if !(gamma.is_finite() && gamma >= 0.0) => {
                return Err(Failure::usage(format!("--gamma {gamma} is not a finite, non-negative factor")))
            }
            Shape::Cosine { min_lr } if !(min_lr.is_finite() && min_lr >= 0.0) => {
                return Err(Failure::usage(format!("--min-lr {min_lr} is not a finite, non-negative rate")))
            }
            _ => {}
        }
        Ok(Schedule { base, warmup, shape, epochs })
    }

    /// The learning rate of epoch `epoch` (1-based).
    pub fn lr(&self, epoch: u64) -> f32 {
        let epoch = epoch.max(1);
        if epoch <= self.warmup {
            return (f64::from(self.base) * epoch as f64 / (self.warmup as f64 + 1.0)) as f32;
        }
        let k = epoch - self.warmup - 1;
        match self.shape {
            Shape::Constant => self.base,
            Shape::Step { size, gamma } => {
                // Past 2^31 steps the factor is 0 or 1 (or gamma's fixed point) anyway.
                let steps = i32::try_from(k / size).unwrap_or(i32::MAX);
                (f64::from(self.base) * f64::from(gamma).powi(steps)) as f32
            }
            Shape::Cosine { min_lr } => {
                let span = self.epochs.saturating_sub(self.warmup).max(1);
                let phase = std::f64::consts::PI * k.min(span) as f64 / span as f64;
                let (base, min) = (f64::from(self.base), f64::from(min_lr));
                (min + (base - min) * (1.0 + phase.cos()) / 2.0) as f32
            }
        }
    }

    /// Whether the rate ever changes (otherwise nothing is reported about it).
    pub fn varies(&self) -> bool {
        self.warmup > 0 || self.shape != Shape::Constant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() <= 1e-6 * (1.0 + b.abs())
    }

    #[test]
    fn constant_is_the_base_rate() {
        let s = Schedule::new(0.1, 0, Shape::Constant, 5).unwrap();
        assert!((1..=5).all(|e| s.lr(e) == 0.1));
        assert!(!s.varies());
    }

    #[test]
    fn warmup_rises_linearly_to_the_base_rate() {
        let s = Schedule::new(0.3, 2, Shape::Constant, 6).unwrap();
        // PyTorch: LinearLR(start_factor=1/3, total_iters=2) gives 0.1, 0.2, then 0.3.
        let rates: Vec<f32> = (1..=4).map(|e| s.lr(e)).collect();
        assert!(close(rates[0], 0.1) && close(rates[1], 0.2), "{rates:?}");
        assert_eq!(&rates[2..], &[0.3, 0.3]);
        assert!(s.varies());
    }

    #[test]
    fn step_multiplies_by_gamma_every_step_size_epochs() {
        let s = Schedule::new(1.0, 0, Shape::Step { size: 2, gamma: 0.5 }, 10).unwrap();
        let rates: Vec<f32> = (1..=7).map(|e| s.lr(e)).collect();
        assert_eq!(rates, vec![1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125]);
        // After a warmup of 1 epoch the steps count from epoch 2.
        let s = Schedule::new(1.0, 1, Shape::Step { size: 2, gamma: 0.5 }, 10).unwrap();
        let rates: Vec<f32> = (1..=6).map(|e| s.lr(e)).collect();
        assert_eq!(rates, vec![0.5, 1.0, 1.0, 0.5, 0.5, 0.25]);
    }

    #[test]
    fn cosine_anneals_to_the_minimum_over_the_epochs_after_warmup() {
        // CosineAnnealingLR(T_max=4, eta_min=0.0): 1, 0.8536, 0.5, 0.1464.
        let s = Schedule::new(1.0, 0, Shape::Cosine { min_lr: 0.0 }, 4).unwrap();
        let expected = [1.0, 0.853_553_4, 0.5, 0.146_446_6];
        for (e, want) in (1..=4).zip(expected) {
            assert!(close(s.lr(e), want), "epoch {e}: {} vs {want}", s.lr(e));
        }
        // With a floor and a warmup of 2 over 6 epochs: T = 4 cosine epochs from epoch 3.
        let s = Schedule::new(1.0, 2, Shape::Cosine { min_lr: 0.2 }, 6).unwrap();
        assert!(close(s.lr(1), 1.0 / 3.0) && close(s.lr(2), 2.0 / 3.0));
        assert!(close(s.lr(3), 1.0) && close(s.lr(5), 0.6) && close(s.lr(6), 0.2 + 0.8 * 0.146_446_6));
        // Epochs past the span (a longer resumed run) stay at the minimum.
        assert!(close(s.lr(9), 0.2));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        assert!(Schedule::new(1.0, 0, Shape::Step { size: 0, gamma: 0.5 }, 3).is_err());
        assert!(Schedule::new(1.0, 0, Shape::Step { size: 1, gamma: f32::NAN }, 3).is_err());
        assert!(Schedule::new(1.0, 0, Shape::Cosine { min_lr: -1.0 }, 3).is_err());
    }
}
