//! The parameter tensors of a model, flattened with PyTorch `state_dict`-style names
//! (`cell.weight`, `expert.3.l1.bias`) and concrete shapes: what checkpoints hold.

use crate::shape::{Dim, Symbol};
use crate::typed::{ComponentId, Instance, Program};

/// One parameter tensor of a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub init: ParamInit,
}

/// How a parameter is initialised, as PyTorch initialises `nn.Linear`, `nn.Embedding` and
/// `nn.LayerNorm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamInit {
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`: Linear weight and bias.
    Uniform { fan_in: i64 },
    /// `N(0, 1)`: Embedding weight.
    Normal,
    /// All ones: LayerNorm weight.
    Ones,
    /// All zeros: LayerNorm bias.
    Zeros,
}

/// How many parameter tensors and elements an instance declares, counted without expanding
/// its arrays (a hostile `-D experts=...` must not allocate). Saturating: a count past
/// `u128` is over every limit anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamCount {
    pub tensors: u128,
    pub elements: u128,
    /// Elements of the largest single tensor.
    pub largest: u128,
}

impl ParamCount {
    fn tensor(elements: u128) -> ParamCount {
        ParamCount { tensors: 1, elements, largest: elements }
    }

    pub fn plus(self, other: ParamCount) -> ParamCount {
        ParamCount {
            tensors: self.tensors.saturating_add(other.tensors),
            elements: self.elements.saturating_add(other.elements),
            largest: self.largest.max(other.largest),
        }
    }

    fn times(self, n: u128) -> ParamCount {
        ParamCount {
            tensors: self.tensors.saturating_mul(n),
            elements: self.elements.saturating_mul(n),
            largest: if n == 0 { 0 } else { self.largest },
        }
    }

    /// The first limit of `amp_ir::limits` this count breaks, as a message.
    pub fn over_limit(&self) -> Option<String> {
        use amp_ir::limits::{MAX_PARAMETERS, MAX_PARAM_TENSORS, MAX_TENSOR_ELEMENTS};
        if self.largest > u128::from(MAX_TENSOR_ELEMENTS) {
            Some(format!("a tensor of {} elements; the limit is {MAX_TENSOR_ELEMENTS}", self.largest))
        } else if self.tensors > u128::from(MAX_PARAM_TENSORS) {
            Some(format!("{} parameter tensors; the limit is {MAX_PARAM_TENSORS}", self.tensors))
        } else if self.elements > u128::from(MAX_PARAMETERS) {
            Some(format!("{} parameters; the limit is {MAX_PARAMETERS}", self.elements))
        } else {
            None
        }
    }
}

impl Program {
    /// The tensors and elements `instance` declares; `None` when a dimension has no value.
    pub fn count_params(&self, instance: &Instance) -> Option<ParamCount> {
        self.count(instance, &|_| None, 0)
    }

    fn count(&self, instance: &Instance, env: &dyn Fn(&Symbol) -> Option<Dim>, depth: usize) -> Option<ParamCount> {
        if depth > 64 {
            return None;
        }
        let value = |d: &Dim| d.substitute(env).value.map(|v| v.max(0) as u128);
        Some(match instance {
            Instance::Linear { input, output } => {
                let (i, o) = (value(input)?, value(output)?);
                ParamCount::tensor(i.saturating_mul(o)).plus(ParamCount::tensor(o))
            }
            Instance::Embedding { count, dim } => ParamCount::tensor(value(count)?.saturating_mul(value(dim)?)),
            Instance::LayerNorm { dim } => {
                let d = value(dim)?;
                ParamCount::tensor(d).plus(ParamCount::tensor(d))
            }
            Instance::Array { elem, len } => self.count(elem, env, depth + 1)?.times(value(len)?),
            Instance::Layer { layer, args } => {
                let def = self.components.get(layer.0 as usize)?;
                let args: Vec<Dim> = args.iter().map(|a| a.substitute(env)).collect();
                let inner =
                    |s: &Symbol| def.hyperparams.iter().position(|h| h.symbol == *s).and_then(|i| args.get(i).cloned());
                let mut total = ParamCount::default();
                for p in &def.params {
                    total = total.plus(self.count(&p.instance, &inner, depth + 1)?);
                }
                total
            }
        })
    }

    /// Every parameter tensor of `model`, in declaration order. `None` when some
    /// dimension has no value (the model has errors) or the model is over the size limits
    /// (E0310).
    pub fn parameter_tensors(&self, model: ComponentId) -> Option<Vec<ParamTensor>> {
        let def = self.components.get(model.0 as usize)?;
        let mut count = ParamCount::default();
        for p in &def.params {
            count = count.plus(self.count_params(&p.instance)?);
        }
        if count.over_limit().is_some() {
            return None;
        }
        let mut out = Vec::new();
        for p in &def.params {
            self.expand(&p.name, &p.instance, &|_| None, &mut out, 0)?;
        }
        Some(out)
    }

    /// Every parameter tensor of network `network` (an index into `networks`): each
    /// node's layer named after the node (`h1.weight`, `h1.bias`), in declaration order.
    /// `None` when some dimension has no value (the network has errors).
    pub fn network_parameter_tensors(&self, network: usize) -> Option<Vec<ParamTensor>> {
        let def = self.networks.get(network)?;
        let mut out = Vec::new();
        for node in &def.nodes {
            if let Some(instance) = &node.instance {
                self.expand(&node.name, instance, &|_| None, &mut out, 0)?;
            }
        }
        Some(out)
    }

    fn expand(
        &self,
        prefix: &str,
        instance: &Instance,
        env: &dyn Fn(&Symbol) -> Option<Dim>,
        out: &mut Vec<ParamTensor>,
        depth: usize,
    ) -> Option<()> {
        // Layers cannot contain themselves in a checked program; the bound keeps a
        // program with errors from recursing forever.
        if depth > 64 {
            return None;
        }
        let value = |d: &Dim| d.substitute(env).value;
        match instance {
            Instance::Linear { input, output } => {
                let (i, o) = (value(input)?, value(output)?);
                let init = ParamInit::Uniform { fan_in: i };
                out.push(ParamTensor { name: format!("{prefix}.weight"), shape: vec![o, i], init });
                out.push(ParamTensor { name: format!("{prefix}.bias"), shape: vec![o], init });
            }
            Instance::Embedding { count, dim } => {
                out.push(ParamTensor {
                    name: format!("{prefix}.weight"),
                    shape: vec![value(count)?, value(dim)?],
                    init: ParamInit::Normal,
                });
            }
            Instance::LayerNorm { dim } => {
                let d = value(dim)?;
                out.push(ParamTensor { name: format!("{prefix}.weight"), shape: vec![d], init: ParamInit::Ones });
                out.push(ParamTensor { name: format!("{prefix}.bias"), shape: vec![d], init: ParamInit::Zeros });
            }
            Instance::Array { elem, len } => {
                for i in 0..value(len)? {
                    self.expand(&format!("{prefix}.{i}"), elem, env, out, depth + 1)?;
                }
            }
            Instance::Layer { layer, args } => {
                let def = self.components.get(layer.0 as usize)?;
                let args: Vec<Dim> = args.iter().map(|a| a.substitute(env)).collect();
                let inner =
                    |s: &Symbol| def.hyperparams.iter().position(|h| h.symbol == *s).and_then(|i| args.get(i).cloned());
                for p in &def.params {
                    self.expand(&format!("{prefix}.{}", p.name), &p.instance, &inner, out, depth + 1)?;
                }
            }
        }
        Some(())
    }
}
