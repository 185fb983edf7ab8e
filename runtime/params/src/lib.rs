//! Model parameters: a set of named f32 tensors (PyTorch `state_dict` names and shapes),
//! initialised deterministically from a seed as PyTorch initialises `nn.Linear` and
//! `nn.Embedding`, saved to and loaded from safetensors checkpoints, and updated by the
//! optimizers (SGD, momentum, Adam) one tensor at a time.
//!
//! In: the parameter list of a graph (`amp_ir::Param`) or of a checked program; checkpoint
//! files (untrusted: every malformed file is an error, never a panic). Out: a
//! [`ParamSet`] (gradients use the same type: one tensor per parameter, same order),
//! [`checkpoint::Checkpoint`]s and [`optim::OptimState`]s. Depends on `amp-ir` (parameter
//! specs), `safetensors` (the file format) and `rand` (initialisation).
//!
//! Modules: [`checkpoint`] (safetensors files, optimizer state beside the parameters),
//! [`target`] (atomic writes that replace only regular files, checks before work, stale
//! temporary files), [`optim`] (the update rules, PyTorch's semantics), [`error`].

pub mod checkpoint;
pub mod error;
pub mod optim;
pub mod target;

pub use checkpoint::{load, load_checkpoint, save, save_checkpoint, Checkpoint};
pub use error::{Mismatch, ParamsError, ShapeMismatch};
pub use optim::{OptimConfig, OptimState, Optimizer, OptimizerKind, TensorState};

use amp_ir::ParamInit;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal, Uniform};
use std::collections::HashMap;

/// What a parameter is: its name, shape and initialisation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: ParamInit,
}

impl ParamSpec {
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The specs of a graph's parameters, in the graph's order.
    pub fn of_graph(graph: &amp_ir::Graph) -> Vec<ParamSpec> {
        graph
            .params
            .iter()
            .map(|p| ParamSpec {
                name: p.name.clone(),
                shape: p.shape.iter().map(|&d| d as usize).collect(),
                init: p.init,
            })
            .collect()
    }
}

/// Named f32 tensors in a fixed order (parameters, or gradients of them).
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSet {
    specs: Vec<ParamSpec>,
    data: Vec<Vec<f32>>,
    index: HashMap<String, usize>,
}

impl ParamSet {
    /// All tensors zero (gradient accumulators, or a set to load into).
    pub fn zeros(specs: &[ParamSpec]) -> ParamSet {
        let data = specs.iter().map(|s| vec![0.0; s.elements()]).collect();
        let index = specs.iter().enumerate().map(|(i, s)| (s.name.clone(), i)).collect();
        ParamSet { specs: specs.to_vec(), data, index }
    }

    /// A zero set with the same names and shapes as `self`.
    pub fn zeros_like(&self) -> ParamSet {
        ParamSet::zeros(&self.specs)
    }

    /// Deterministic initialisation: each tensor from its own stream, seeded by `seed` and
    /// its name, so a tensor's values do not depend on which other parameters exist.
    /// Linear weight and bias: `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`; Embedding: `N(0, 1)`;
    /// LayerNorm weight ones, bias zeros (PyTorch's defaults).
    pub fn init(specs: &[ParamSpec], seed: u64) -> ParamSet {
        let mut set = ParamSet::zeros(specs);
        for (spec, values) in set.specs.iter().zip(&mut set.data) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv1a(spec.name.as_bytes()));
            match spec.init {
                ParamInit::Uniform { fan_in } => {
                    let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
                    // A non-empty range of finite bounds: `new` cannot fail.
                    let dist = Uniform::new(-bound, bound).expect("a finite, non-empty range");
                    values.iter_mut().for_each(|v| *v = dist.sample(&mut rng));
                }
                ParamInit::Normal => values.iter_mut().for_each(|v| *v = StandardNormal.sample(&mut rng)),
                ParamInit::Ones => values.iter_mut().for_each(|v| *v = 1.0),
                ParamInit::Zeros => values.iter_mut().for_each(|v| *v = 0.0),
            }
        }
        set
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    pub fn spec(&self, i: usize) -> &ParamSpec {
        &self.specs[i]
    }

    /// The position of the parameter named `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn data(&self, i: usize) -> &[f32] {
        &self.data[i]
    }

    pub fn data_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.data[i]
    }

    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.index(name).map(|i| self.data[i].as_slice())
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut [f32]> {
        let i = self.index(name)?;
        Some(self.data[i].as_mut_slice())
    }

    /// `(spec, values)` of every tensor, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&ParamSpec, &[f32])> {
        self.specs.iter().zip(self.data.iter().map(Vec::as_slice))
    }

    /// `(spec, values)` of every tensor, in order, mutably: lets a caller hand disjoint
    /// tensors to different owners (the executor's Ppt nodes) at once.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ParamSpec, &mut [f32])> {
        self.specs.iter().zip(self.data.iter_mut().map(Vec::as_mut_slice))
    }

    /// Whether both sets have the same names and shapes in the same order.
    pub fn same_layout(&self, other: &ParamSet) -> bool {
        self.specs.len() == other.specs.len()
            && self.specs.iter().zip(&other.specs).all(|(a, b)| a.name == b.name && a.shape == b.shape)
    }

    /// Refuses parameters holding a NaN or an infinity, naming the first tensor that does:
    /// such values only ever come from a run that blew up, and computing with them gives
    /// NaN everywhere without saying why.
    pub fn check_finite(&self) -> Result<(), ParamsError> {
        for (spec, values) in self.iter() {
            if let Some(index) = values.iter().position(|v| !v.is_finite()) {
                let count = values.iter().filter(|v| !v.is_finite()).count();
                let name = spec.name.clone();
                return Err(ParamsError::NonFinite { name, index, value: values[index], count });
            }
        }
        Ok(())
    }

    /// Sets every value to zero (reusing a gradient accumulator).
    pub fn fill_zero(&mut self) {
        self.data.iter_mut().for_each(|d| d.iter_mut().for_each(|v| *v = 0.0));
    }
}

/// FNV-1a, to derive a per-tensor seed from its name (stable across platforms and runs).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec { name: "emb.weight".into(), shape: vec![50, 16], init: ParamInit::Normal },
            ParamSpec { name: "fc.weight".into(), shape: vec![8, 16], init: ParamInit::Uniform { fan_in: 16 } },
            ParamSpec { name: "fc.bias".into(), shape: vec![8], init: ParamInit::Uniform { fan_in: 16 } },
        ]
    }

    #[test]
    fn init_follows_pytorch_distributions() {
        let set = ParamSet::init(&specs(), 7);
        let w = set.get("fc.weight").unwrap();
        assert!(w.iter().all(|v| v.abs() <= 0.25), "U(-1/sqrt(16), 1/sqrt(16))");
        assert!(w.iter().any(|v| v.abs() > 0.15), "spread over the range");
        let e = set.get("emb.weight").unwrap();
        let mean = e.iter().sum::<f32>() / e.len() as f32;
        let var = e.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / e.len() as f32;
        assert!(mean.abs() < 0.15 && (var - 1.0).abs() < 0.2, "N(0, 1): mean {mean}, var {var}");
    }

    #[test]
    fn init_is_deterministic_per_seed_and_independent_of_other_tensors() {
        assert_eq!(ParamSet::init(&specs(), 3), ParamSet::init(&specs(), 3));
        assert_ne!(ParamSet::init(&specs(), 3), ParamSet::init(&specs(), 4));
        let alone = ParamSet::init(&specs()[1..], 3);
        assert_eq!(alone.get("fc.weight"), ParamSet::init(&specs(), 3).get("fc.weight"));
    }
}
