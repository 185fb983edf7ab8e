//! A model's parameters as the evaluator sees them: each `param` instance bound to the
//! positions of its tensors in the [`ParamSet`], layers with the values of their
//! hyperparameters (so that symbolic shapes in a layer body can be evaluated).

use amp_params::ParamSpec;
use amp_sema::{ComponentId, Dim, Instance, Program, Symbol};

/// The most elements of a parameter array (`[Mlp(d, d, d); n]`) the evaluator binds.
const MAX_ARRAY_LEN: i64 = 1 << 20;
/// Layers nest at most this deep (a checked program cannot nest forever; this bounds the
/// walk on one that has errors).
const MAX_NESTING: usize = 64;

/// A `param` instance with its tensors located in the parameter set.
#[derive(Clone, Debug)]
pub(crate) enum Bound {
    /// Positions of `.weight` (`[out, in]`) and `.bias` (`[out]`).
    Linear { weight: usize, bias: usize },
    /// Position of `.weight` (`[count, dim]`).
    Embedding { weight: usize },
    /// Positions of a LayerNorm's `.weight` and `.bias` (both `[dim]`).
    LayerNorm { weight: usize, bias: usize },
    /// A layer instance: its component, the values of its hyperparameters, and its own
    /// params bound in declaration order.
    Layer { component: ComponentId, hyper: Vec<(Symbol, i64)>, params: Vec<Bound> },
    /// `[elem; len]`.
    Array(Vec<Bound>),
}

/// The parameter specs of `model`, as `Program::parameter_tensors` names and shapes them
/// (`cell.weight`, `expert.3.l1.bias`), in that order. `None` when some dimension has no
/// value or is negative (the model has errors).
pub fn param_specs(program: &Program, model: ComponentId) -> Option<Vec<ParamSpec>> {
    specs_of(program.parameter_tensors(model)?)
}

/// The runtime's specs of the checker's parameter tensors; `None` when a size is negative.
pub(crate) fn specs_of(tensors: Vec<amp_sema::ParamTensor>) -> Option<Vec<ParamSpec>> {
    tensors
        .into_iter()
        .map(|t| {
            let shape = t.shape.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<Vec<usize>>>()?;
            let init = match t.init {
                amp_sema::ParamInit::Uniform { fan_in } => {
                    amp_ir::ParamInit::Uniform { fan_in: u64::try_from(fan_in).ok()? }
                }
                amp_sema::ParamInit::Normal => amp_ir::ParamInit::Normal,
                amp_sema::ParamInit::Ones => amp_ir::ParamInit::Ones,
                amp_sema::ParamInit::Zeros => amp_ir::ParamInit::Zeros,
            };
            Some(ParamSpec { name: t.name, shape, init })
        })
        .collect()
}

/// Binds the params of `model` in the order `param_specs` lists their tensors; also returns
/// how many tensors that is. `None` when some dimension has no value.
pub(crate) fn bind_model(program: &Program, model: ComponentId) -> Option<(Vec<Bound>, usize)> {
    let def = program.components.get(model.0 as usize)?;
    let mut next = 0;
    let bound =
        def.params.iter().map(|p| bind(program, &p.instance, &[], &mut next, 0)).collect::<Option<Vec<Bound>>>()?;
    Some((bound, next))
}

/// The value of `dim` where the symbols in `env` (a layer's hyperparameters) have values.
pub(crate) fn dim_value(dim: &Dim, env: &[(Symbol, i64)]) -> Option<i64> {
    dim.value.or_else(|| {
        let lookup = |s: &Symbol| env.iter().find(|(x, _)| x == s).map(|(_, v)| Dim::constant(*v));
        dim.substitute(&lookup).value
    })
}

pub(crate) fn bind(
    program: &Program,
    instance: &Instance,
    env: &[(Symbol, i64)],
    next: &mut usize,
    depth: usize,
) -> Option<Bound> {
    if depth > MAX_NESTING {
        return None;
    }
    match instance {
        Instance::Linear { .. } => {
            let bound = Bound::Linear { weight: *next, bias: *next + 1 };
            *next += 2;
            Some(bound)
        }
        Instance::Embedding { .. } => {
            let bound = Bound::Embedding { weight: *next };
            *next += 1;
            Some(bound)
        }
        Instance::LayerNorm { .. } => {
            let bound = Bound::LayerNorm { weight: *next, bias: *next + 1 };
            *next += 2;
            Some(bound)
        }
        Instance::Array { elem, len } => {
            let len = dim_value(len, env).filter(|n| (0..=MAX_ARRAY_LEN).contains(n))?;
            let elems = (0..len).map(|_| bind(program, elem, env, next, depth + 1)).collect::<Option<Vec<_>>>()?;
            Some(Bound::Array(elems))
        }
        Instance::Layer { layer, args } => {
            let def = program.components.get(layer.0 as usize)?;
            if def.hyperparams.len() != args.len() {
                return None;
            }
            let hyper = def
                .hyperparams
                .iter()
                .zip(args)
                .map(|(h, a)| Some((h.symbol.clone(), dim_value(a, env)?)))
                .collect::<Option<Vec<_>>>()?;
            let params = def
                .params
                .iter()
                .map(|p| bind(program, &p.instance, &hyper, next, depth + 1))
                .collect::<Option<Vec<_>>>()?;
            Some(Bound::Layer { component: *layer, hyper, params })
        }
    }
}
