//! What an expression lowers to.

use amp_ir::{DataStep, FieldId, PayloadInt, PayloadTy, StateExpr};
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
    /// An element of a parameter array chosen at run time (`expert[i]`), before the call.
    ParamElem(ParamRef, Box<Value>),
    /// A loss: the weighted sum of the loss terms already emitted (see `lowerer/losses.rs`).
    Loss(LossVal),
    /// A sequence of losses (a `map` whose body is a loss), each element's terms emitted in
    /// the element context: `sum`/`mean` make it a loss.
    LossSeq(LossVal, StateExpr),
    Unit,
    /// A computed sequence of tensors: one message holding a batch `f32[?, d]`, with its
    /// length as an int expression.
    Batch {
        port: Port,
        len: StateExpr,
    },
    /// A computed sequence of ints: element `i` is `elem` with `field` = i.
    IntSeq {
        len: StateExpr,
        field: FieldId,
        elem: StateExpr,
    },
    /// `zip(a, b, ..)` of sequences of one length.
    Zip(Vec<Value>),
    /// The indices `top_k` chose, still inside the payload `source` they come from.
    TopKIdx {
        source: Port,
        k: u32,
    },
    /// An int computed from a payload (`argmax(v)`, `idx[j]` of `top_k`); it becomes a
    /// state field where it routes messages.
    PayloadInt {
        source: Port,
        int: PayloadInt,
    },
    /// Inside structural recursion: the subtree hanging from call site `site` of the
    /// current tree node (a recursive-typed field bound by `match`).
    Subtree {
        site: u32,
    },
    /// Inside structural recursion: the subtrees in the collection field at call site
    /// `site` of the current node (`children: [Tree]` bound by `match`); `path` leads to
    /// the collection in the data.
    Subtrees {
        site: u32,
        path: Vec<DataStep>,
    },
    /// An element of [`Value::Subtrees`] inside the `map` over it: the recursive call on it
    /// gives this value, the child's result (a row of each result batch).
    ChildResult(Box<Value>),
    /// An int variable a loop updated: its state field is cleared when the loop ends, so
    /// it cannot be read after the loop.
    LoopInt,
}

/// A loss as the lowering carries it: the terms that make it up. A term is a loss node
/// emitted where it was computed (it reports once per message of its context: per loop
/// iteration, per element, per tree node), or, inside structural recursion, a child's loss
/// (the child's own nodes report it), or, inside a loop body, the loss carried from the
/// previous iterations. The node's op gets the term's weight and count once the whole loss
/// is known.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LossVal {
    pub terms: Vec<Term>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Term {
    /// The loss node, or for a child's loss the node that would receive the child's
    /// value (which arm created it), or for a carried loss the source.
    pub node: NodeIndex,
    pub kind: TermKind,
    pub weight: f32,
    /// Divided by this count (a mean's length), when there is one.
    pub count: Option<StateExpr>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TermKind {
    Node,
    /// Result leaf `leaf` of the recursive call on call site `site`.
    Child {
        site: u32,
        leaf: u32,
    },
    /// The value loss variable `local` had when loop iteration began.
    Carry {
        local: u32,
    },
}

impl LossVal {
    pub fn node(node: NodeIndex) -> LossVal {
        LossVal { terms: vec![Term { node, kind: TermKind::Node, weight: 1.0, count: None }] }
    }

    /// `self + other`: terms of the same node (and kind) add their weights.
    pub fn add(mut self, other: LossVal) -> Result<LossVal, &'static str> {
        for t in other.terms {
            match self.terms.iter_mut().find(|s| s.node == t.node && s.kind == t.kind) {
                Some(s) if s.count == t.count => s.weight += t.weight,
                Some(_) => return Err("one loss term divided by two different counts"),
                None => self.terms.push(t),
            }
        }
        self.terms.retain(|t| t.weight != 0.0);
        Ok(self)
    }

    pub fn scale(mut self, c: f32) -> LossVal {
        self.terms.iter_mut().for_each(|t| t.weight *= c);
        self.terms.retain(|t| t.weight != 0.0);
        self
    }

    /// Every term divided by `n` (evaluated where each term is computed).
    pub fn over(mut self, n: &StateExpr) -> LossVal {
        for t in &mut self.terms {
            t.count = Some(match t.count.take() {
                None => n.clone(),
                Some(c) => StateExpr::bin(amp_ir::IntOp::Mul, c, n.clone()),
            });
        }
        self
    }
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
            Value::Tensor(p)
            | Value::Batch { port: p, .. }
            | Value::TopKIdx { source: p, .. }
            | Value::PayloadInt { source: p, .. } => out.push(p.clone()),
            Value::Tuple(vs) | Value::Zip(vs) => vs.iter().for_each(|v| v.collect_ports(out)),
            Value::ParamElem(_, index) | Value::ChildResult(index) => index.collect_ports(out),
            _ => {}
        }
    }

    /// The same value with its ports replaced, in the order of [`Value::ports`].
    pub fn with_ports(&self, ports: &mut impl Iterator<Item = Port>) -> Value {
        match self {
            Value::Tensor(p) => Value::Tensor(ports.next().unwrap_or_else(|| p.clone())),
            Value::Batch { port, len } => {
                Value::Batch { port: ports.next().unwrap_or_else(|| port.clone()), len: len.clone() }
            }
            Value::TopKIdx { source, k } => {
                Value::TopKIdx { source: ports.next().unwrap_or_else(|| source.clone()), k: *k }
            }
            Value::PayloadInt { source, int } => {
                Value::PayloadInt { source: ports.next().unwrap_or_else(|| source.clone()), int: int.clone() }
            }
            Value::Tuple(vs) => Value::Tuple(vs.iter().map(|v| v.with_ports(ports)).collect()),
            Value::Zip(vs) => Value::Zip(vs.iter().map(|v| v.with_ports(ports)).collect()),
            Value::ParamElem(p, index) => Value::ParamElem(p.clone(), Box::new(index.with_ports(ports))),
            Value::ChildResult(v) => Value::ChildResult(Box::new(v.with_ports(ports))),
            other => other.clone(),
        }
    }
}
