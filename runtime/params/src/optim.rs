//! Optimizers with PyTorch's semantics, applied one tensor at a time.
//!
//! Each parameter tensor has its own [`TensorState`] (step count and buffers), so an owner
//! of a few tensors (the executor's Ppt nodes, which update locally) can update them
//! without the rest. [`Optimizer`] bundles a config with the states of a whole
//! [`ParamSet`] for callers that update everything at once.
//!
//! Rules (as `torch.optim` with its defaults; `g` is the gradient after scaling and
//! clipping, `p` the parameter):
//! - weight decay: `g += weight_decay * p` (L2 added to the gradient, PyTorch's
//!   `weight_decay` argument, not AdamW's decoupled decay);
//! - SGD: `p -= lr * g`;
//! - momentum: `b = μ b + g` (the buffer starts at zero, which equals PyTorch's first step
//!   `b = g` with no dampening); `p -= lr * b`;
//! - Adam: `m = β1 m + (1-β1) g`, `v = β2 v + (1-β2) g²`, `p -= lr / (1-β1^t) * m /
//!   (sqrt(v) / sqrt(1-β2^t) + ε)` with the bias corrections computed in f64 as PyTorch
//!   does (Python floats), the rest in f32.
//!
//! Gradient clipping by norm follows `torch.nn.utils.clip_grad_norm_`: when the norm of the
//! gradients exceeds `max_norm`, they are scaled by `max_norm / (norm + 1e-6)`. Over a whole
//! set it is the global norm; the executor clips over each Ppt's own tensors (the only
//! norm a local update can know).

use crate::{ParamSet, ParamSpec, ParamsError};

/// Which update rule, with its hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    Sgd,
    /// SGD with momentum `momentum` (no dampening, no Nesterov).
    Momentum {
        momentum: f32,
    },
    Adam {
        beta1: f32,
        beta2: f32,
        eps: f32,
    },
}

impl OptimizerKind {
    /// Adam with PyTorch's defaults: β = (0.9, 0.999), ε = 1e-8.
    pub const ADAM: OptimizerKind = OptimizerKind::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8 };

    /// `sgd`, `momentum` or `adam`: the name stored in checkpoints.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Momentum { .. } => "momentum",
            OptimizerKind::Adam { .. } => "adam",
        }
    }

    /// The buffers one tensor needs (momentum: one; Adam: two).
    fn buffers(&self) -> usize {
        match self {
            OptimizerKind::Sgd => 0,
            OptimizerKind::Momentum { .. } => 1,
            OptimizerKind::Adam { .. } => 2,
        }
    }
}

/// An optimizer's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimConfig {
    pub kind: OptimizerKind,
    pub lr: f32,
    /// L2 penalty added to the gradient (PyTorch's `weight_decay`); 0 for none.
    pub weight_decay: f32,
    /// Clip the gradient norm to this value before the update; `None` for no clipping.
    pub clip_norm: Option<f32>,
}

impl OptimConfig {
    pub fn sgd(lr: f32) -> OptimConfig {
        OptimConfig { kind: OptimizerKind::Sgd, lr, weight_decay: 0.0, clip_norm: None }
    }

    pub fn momentum(lr: f32, momentum: f32) -> OptimConfig {
        OptimConfig { kind: OptimizerKind::Momentum { momentum }, lr, weight_decay: 0.0, clip_norm: None }
    }

    /// Adam with PyTorch's default β and ε.
    pub fn adam(lr: f32) -> OptimConfig {
        OptimConfig { kind: OptimizerKind::ADAM, lr, weight_decay: 0.0, clip_norm: None }
    }

    pub fn with_weight_decay(self, weight_decay: f32) -> OptimConfig {
        OptimConfig { weight_decay, ..self }
    }

    pub fn with_clip_norm(self, max_norm: f32) -> OptimConfig {
        OptimConfig { clip_norm: Some(max_norm), ..self }
    }
}

/// The optimizer's memory for one tensor: how many updates it had and its buffers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorState {
    /// Updates applied so far (Adam's `t` after the update).
    pub step: u64,
    /// Momentum: the momentum buffer. Adam: the first moment (`exp_avg`). Empty for SGD.
    pub m: Vec<f32>,
    /// Adam: the second moment (`exp_avg_sq`). Empty otherwise.
    pub v: Vec<f32>,
}

impl TensorState {
    /// A fresh state for a tensor of `len` elements.
    pub fn new(kind: &OptimizerKind, len: usize) -> TensorState {
        let buffers = kind.buffers();
        TensorState {
            step: 0,
            m: if buffers >= 1 { vec![0.0; len] } else { Vec::new() },
            v: if buffers >= 2 { vec![0.0; len] } else { Vec::new() },
        }
    }

    /// Whether the buffers fit `kind` and a tensor of `len` elements.
    pub fn fits(&self, kind: &OptimizerKind, len: usize) -> bool {
        let buffers = kind.buffers();
        let m_ok = if buffers >= 1 { self.m.len() == len } else { self.m.is_empty() };
        let v_ok = if buffers >= 2 { self.v.len() == len } else { self.v.is_empty() };
        m_ok && v_ok
    }
}

/// The optimizer state of every tensor of a parameter set, in the set's order: what a
/// checkpoint stores so that `--resume` continues exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimState {
    /// [`OptimizerKind::name`] of the optimizer that made it.
    pub kind: String,
    pub tensors: Vec<TensorState>,
}

impl OptimState {
    /// Fresh states for every tensor of `specs`.
    pub fn new(kind: &OptimizerKind, specs: &[ParamSpec]) -> OptimState {
        OptimState {
            kind: kind.name().to_string(),
            tensors: specs.iter().map(|s| TensorState::new(kind, s.elements())).collect(),
        }
    }

    /// Checks that the state belongs to `kind` and fits `specs`.
    pub fn check(&self, kind: &OptimizerKind, specs: &[ParamSpec]) -> Result<(), ParamsError> {
        if self.kind != kind.name() {
            let message = format!("the state is of optimizer `{}`, not `{}`", self.kind, kind.name());
            return Err(ParamsError::OptimizerState { message });
        }
        if self.tensors.len() != specs.len() {
            let message = format!("{} tensor states for {} parameters", self.tensors.len(), specs.len());
            return Err(ParamsError::OptimizerState { message });
        }
        for (state, spec) in self.tensors.iter().zip(specs) {
            if !state.fits(kind, spec.elements()) {
                let message = format!("the buffers of `{}` do not fit its {} elements", spec.name, spec.elements());
                return Err(ParamsError::OptimizerState { message });
            }
        }
        Ok(())
    }
}

/// One update of one tensor: `grad` is scaled by `grad_scale` (e.g. `1 / count` to
/// average accumulated gradients, times a clipping coefficient), weight decay is added,
/// and the rule of `config.kind` applied. `state` must fit the tensor (see
/// [`TensorState::fits`]); a state that does not is reset first rather than indexed out of
/// bounds.
pub fn update_tensor(config: &OptimConfig, state: &mut TensorState, param: &mut [f32], grad: &[f32], grad_scale: f32) {
    let n = param.len().min(grad.len());
    if !state.fits(&config.kind, param.len()) {
        *state = TensorState::new(&config.kind, param.len());
    }
    state.step += 1;
    let wd = config.weight_decay;
    let lr = config.lr;
    let effective = |p: f32, g: f32| g * grad_scale + wd * p;
    match config.kind {
        OptimizerKind::Sgd => {
            for (p, &g) in param[..n].iter_mut().zip(grad) {
                *p -= lr * effective(*p, g);
            }
        }
        OptimizerKind::Momentum { momentum } => {
            for ((p, &g), b) in param[..n].iter_mut().zip(grad).zip(&mut state.m) {
                *b = momentum * *b + effective(*p, g);
                *p -= lr * *b;
            }
        }
        OptimizerKind::Adam { beta1, beta2, eps } => {
            let t = state.step.min(i32::MAX as u64) as i32;
            let bias1 = 1.0 - f64::from(beta1).powi(t);
            let bias2_sqrt = (1.0 - f64::from(beta2).powi(t)).sqrt();
            let step_size = (f64::from(lr) / bias1) as f32;
            let bias2_sqrt = bias2_sqrt as f32;
            for (((p, &g), m), v) in param[..n].iter_mut().zip(grad).zip(&mut state.m).zip(&mut state.v) {
                let g = effective(*p, g);
                *m = beta1 * *m + (1.0 - beta1) * g;
                *v = beta2 * *v + (1.0 - beta2) * g * g;
                let denom = v.sqrt() / bias2_sqrt + eps;
                *p -= step_size * *m / denom;
            }
        }
    }
}

/// The L2 norm of several gradient tensors taken together (accumulated in f64).
pub fn global_norm<'a>(grads: impl IntoIterator<Item = &'a [f32]>, scale: f32) -> f32 {
    let sum: f64 = grads.into_iter().flat_map(|g| g.iter()).map(|&x| f64::from(x * scale).powi(2)).sum();
    sum.sqrt() as f32
}

/// The factor `clip_grad_norm_` multiplies the gradients by: 1 when `norm <= max_norm`,
/// else `max_norm / (norm + 1e-6)`.
pub fn clip_coefficient(norm: f32, max_norm: f32) -> f32 {
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        coef
    } else {
        1.0
    }
}

/// A config with the state of every tensor of a parameter set.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    config: OptimConfig,
    state: OptimState,
}

impl Optimizer {
    pub fn new(config: OptimConfig, specs: &[ParamSpec]) -> Optimizer {
        Optimizer { config, state: OptimState::new(&config.kind, specs) }
    }

    /// Continues from a saved state (see `checkpoint::load_checkpoint`).
    pub fn restore(config: OptimConfig, state: OptimState, specs: &[ParamSpec]) -> Result<Optimizer, ParamsError> {
        state.check(&config.kind, specs)?;
        Ok(Optimizer { config, state })
    }

    pub fn config(&self) -> &OptimConfig {
        &self.config
    }

    pub fn state(&self) -> &OptimState {
        &self.state
    }

    pub fn into_state(self) -> OptimState {
        self.state
    }

    /// Updates every tensor of `params` with `grads * grad_scale` (same layout), clipping
    /// by the global norm when configured. Tensors beyond the state's are left alone.
    pub fn step(&mut self, params: &mut ParamSet, grads: &ParamSet, grad_scale: f32) {
        let mut scale = grad_scale;
        if let Some(max_norm) = self.config.clip_norm {
            let norm = global_norm(grads.iter().map(|(_, g)| g), grad_scale);
            scale *= clip_coefficient(norm, max_norm);
        }
        for (i, ((_, p), state)) in params.iter_mut().zip(&mut self.state.tensors).enumerate() {
            if i < grads.len() {
                update_tensor(&self.config, state, p, grads.data(i), scale);
            }
        }
    }

    /// Updates tensor `i` alone with its own step counter (no clipping: that needs the
    /// norm of the tensors updated together, which the caller knows).
    pub fn step_tensor(&mut self, i: usize, param: &mut [f32], grad: &[f32], grad_scale: f32) {
        if let Some(state) = self.state.tensors.get_mut(i) {
            update_tensor(&self.config, state, param, grad, grad_scale);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amp_ir::ParamInit;

    fn spec(n: usize) -> Vec<ParamSpec> {
        vec![ParamSpec { name: "w".into(), shape: vec![n], init: ParamInit::Normal }]
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    fn run(config: OptimConfig, p0: &[f32], grads: &[&[f32]]) -> Vec<f32> {
        let specs = spec(p0.len());
        let mut params = ParamSet::zeros(&specs);
        params.data_mut(0).copy_from_slice(p0);
        let mut opt = Optimizer::new(config, &specs);
        for g in grads {
            let mut gs = ParamSet::zeros(&specs);
            gs.data_mut(0).copy_from_slice(g);
            opt.step(&mut params, &gs, 1.0);
        }
        params.data(0).to_vec()
    }

    #[test]
    fn sgd_with_weight_decay() {
        // p = 1 - 0.1 * (0.5 + 0.01 * 1) = 0.949; p = 0.949 - 0.1 * (-1 + 0.00949)
        let p = run(OptimConfig::sgd(0.1).with_weight_decay(0.01), &[1.0], &[&[0.5], &[-1.0]]);
        close(&p, &[0.949 - 0.1 * (-1.0 + 0.00949)]);
    }

    #[test]
    fn momentum_matches_pytorch() {
        // b1 = 1, p1 = 1 - 0.1 = 0.9; b2 = 0.9 * 1 + 2 = 2.9, p2 = 0.9 - 0.29 = 0.61
        let p = run(OptimConfig::momentum(0.1, 0.9), &[1.0], &[&[1.0], &[2.0]]);
        close(&p, &[0.61]);
    }

    #[test]
    fn adam_matches_hand_computed_steps() {
        // Step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2 => p -= lr * g / (|g| + eps).
        let p = run(OptimConfig::adam(0.01), &[1.0, -2.0], &[&[0.5, -4.0]]);
        close(&p, &[1.0 - 0.01 * 0.5 / (0.5 + 1e-8), -2.0 + 0.01 * 4.0 / (4.0 + 1e-8)]);
        // Two steps with g = 1 then 3 (computed by hand in f64).
        let m: f64 = 0.9 * 0.1 + 0.1 * 3.0;
        let v: f64 = 0.999 * 0.001 + 0.001 * 9.0;
        let p1 = 1.0 - 0.01;
        let expected = p1 - 0.01 / (1.0 - 0.81) * m / ((v / (1.0 - 0.999f64.powi(2))).sqrt() + 1e-8);
        let p = run(OptimConfig::adam(0.01), &[1.0], &[&[1.0], &[3.0]]);
        close(&p, &[expected as f32]);
    }

    #[test]
    fn adam_weight_decay_is_l2_in_the_gradient() {
        // g = 0 + 0.5 * 2 = 1 => first step moves by lr whatever the magnitude.
        let p = run(OptimConfig::adam(0.1).with_weight_decay(0.5), &[2.0], &[&[0.0]]);
        close(&p, &[1.9]);
    }

    #[test]
    fn clipping_scales_by_the_global_norm() {
        let specs = vec![
            ParamSpec { name: "a".into(), shape: vec![1], init: ParamInit::Normal },
            ParamSpec { name: "b".into(), shape: vec![1], init: ParamInit::Normal },
        ];
        let mut params = ParamSet::zeros(&specs);
        let mut grads = ParamSet::zeros(&specs);
        grads.data_mut(0)[0] = 3.0;
        grads.data_mut(1)[0] = 4.0;
        let mut opt = Optimizer::new(OptimConfig::sgd(1.0).with_clip_norm(1.0), &specs);
        opt.step(&mut params, &grads, 1.0);
        let coef = 1.0 / (5.0 + 1e-6);
        close(params.data(0), &[-3.0 * coef]);
        close(params.data(1), &[-4.0 * coef]);
        // Below the threshold nothing changes.
        assert_eq!(clip_coefficient(0.5, 1.0), 1.0);
    }

    #[test]
    fn grad_scale_averages_and_steps_count_per_tensor() {
        let specs = spec(1);
        let mut opt = Optimizer::new(OptimConfig::adam(0.1), &specs);
        let mut p = [0.0f32];
        opt.step_tensor(0, &mut p, &[4.0], 0.25);
        opt.step_tensor(0, &mut p, &[4.0], 0.25);
        assert_eq!(opt.state().tensors[0].step, 2);
        assert!((p[0] + 0.2).abs() < 1e-5, "two Adam steps of a constant gradient move by 2 lr: {p:?}");
    }

    #[test]
    fn restore_checks_kind_and_sizes() {
        let specs = spec(3);
        let state = OptimState::new(&OptimizerKind::ADAM, &specs);
        assert!(Optimizer::restore(OptimConfig::adam(0.1), state.clone(), &specs).is_ok());
        assert!(Optimizer::restore(OptimConfig::sgd(0.1), state.clone(), &specs).is_err());
        assert!(Optimizer::restore(OptimConfig::adam(0.1), state, &spec(4)).is_err());
    }
}
