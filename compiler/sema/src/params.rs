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

/// How a parameter is initialised, as PyTorch initialises `nn.Linear` and `nn.Embedding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamInit {
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`: Linear weight and bias.
    Uniform { fan_in: i64 },
    /// `N(0, 1)`: Embedding weight.
    Normal,
}

impl Program {
    /// Every parameter tensor of `model`, in declaration order. `None` when some
    /// dimension has no value (the model has errors).
    pub fn parameter_tensors(&self, model: ComponentId) -> Option<Vec<ParamTensor>> {
        let def = self.components.get(model.0 as usize)?;
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
