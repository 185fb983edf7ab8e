//! What an expression lowers to.

use amp_ir::{DataStep, PayloadTy, StateExpr};
use amp_sema::Instance;
use petgraph::stable_graph::NodeIndex;
use std::sync::Arc;

/// An output port of a node, with the payload type it carries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Port {
    pub node: NodeIndex,
    pub port: u16,
    pub ty: PayloadTy,
}

/// A `param` (possibly inside a layer instance): its dotted name prefix and what it is.
#[derive(Clone, Debug)]
pub(crate) struct ParamRef {
    pub prefix: String,
    pub instance: Arc<Instance>,
    /// Substitution of the owning layer's symbols (for the dims of an inner layer's
    /// arguments).
    pub subst: Vec<(amp_sema::Symbol, amp_sema::Dim)>,
}

#[derive(Clone, Debug)]
pub(crate) enum Value {
    Tensor(Port),
    Int(StateExpr),
    Bool(StateExpr),
    /// A record, sequence or enum of the instance's data, by path from the instance.
    Data(Vec<DataStep>),
    /// `a..b` or `range(n)`.
    Range(StateExpr, StateExpr),
    Tuple(Vec<Value>),
    Param(ParamRef),
    /// The value of a `loss` function: a loss node was created.
    Loss,
    Unit,
}

impl Value {
    /// The tensor ports inside, in a fixed order.
    pub fn ports(&self) -> Vec<Port> {
        let mut out = Vec::new();
        self.collect_ports(&mut out);
        out
    }

    fn collect_ports(&self, out: &mut Vec<Port>) {
        match self {
            Value::Tensor(p) => out.push(p.clone()),
            Value::Tuple(vs) => vs.iter().for_each(|v| v.collect_ports(out)),
            _ => {}
        }
    }

    /// The same value with its ports replaced, in the order of [`Value::ports`].
    pub fn with_ports(&self, ports: &mut impl Iterator<Item = Port>) -> Value {
        match self {
            Value::Tensor(p) => Value::Tensor(ports.next().unwrap_or_else(|| p.clone())),
            Value::Tuple(vs) => Value::Tuple(vs.iter().map(|v| v.with_ports(ports)).collect()),
            other => other.clone(),
        }
    }
}
