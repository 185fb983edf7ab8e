//! A chain of routing nodes run as one node (see `crate::load::chain`): `phi`, `cond`, `switch`
//! and `isu` nodes that pass each message on unchanged but for its state, composed at
//! load so that a message crosses the whole chain in one worker step instead of one per
//! node. Each member keeps its own op (and what it caches, under its own key): the chain
//! runs them in turn on a scratch context, so its results are exactly theirs.

use super::{Emit, NodeCx, NodeOp};
use crate::error::OpError;
use crate::load::program::{ChainSpec, Next};
use crate::message::Msg;
use std::sync::Arc;

pub(crate) struct ChainOp {
    spec: Arc<ChainSpec>,
    ops: Vec<Box<dyn NodeOp>>,
    /// What the member being run emitted (one message).
    scratch: Vec<Emit>,
}

impl ChainOp {
    pub fn new(spec: Arc<ChainSpec>, ops: Vec<Box<dyn NodeOp>>) -> ChainOp {
        ChainOp { spec, ops, scratch: Vec::with_capacity(1) }
    }

    /// Runs member `at` on one message; the port and message it emitted.
    fn step(&mut self, cx: &NodeCx, at: usize, forward: bool, port: u16, msg: Msg) -> Result<(u16, Msg), OpError> {
        let (Some(node), Some(op)) = (self.spec.members.get(at), self.ops.get_mut(at)) else {
            return Err(OpError::Unsupported { op: "a chain member that does not exist (internal)" });
        };
        self.scratch.clear();
        let mut member_cx = NodeCx { node, shared: cx.shared, out: &mut self.scratch, mode: cx.mode };
        let ran = if forward { op.forward(&mut member_cx, port, msg) } else { op.backward(&mut member_cx, port, msg) };
        ran.map_err(|error| OpError::InChain { member: at, error: Box::new(error) })?;
        match (self.scratch.pop(), self.scratch.is_empty()) {
            (Some(Emit::Forward { port, msg }), true) if forward => Ok((port, msg)),
            (Some(Emit::Backward { port, msg }), true) if !forward => Ok((port, msg)),
            _ => Err(OpError::Unsupported { op: "a routing op that did not pass exactly one message on (internal)" }),
        }
    }
}

impl NodeOp for ChainOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let (mut at, mut port, mut msg) = (0, port, msg);
        // Each member is visited at most once: the wiring is a tree from the root.
        for _ in 0..self.spec.members.len() {
            let (out, next_msg) = self.step(cx, at, true, port, msg)?;
            match self.spec.next.get(at).and_then(|n| n.get(usize::from(out))) {
                Some(&Next::Member(j)) => (at, port, msg) = (j, 0, next_msg),
                Some(&Next::Exit(e)) => {
                    cx.forward(e, next_msg);
                    return Ok(());
                }
                None => break,
            }
        }
        Err(OpError::Unsupported { op: "a chain that does not end in an exit (internal)" })
    }

    fn backward(&mut self, cx: &mut NodeCx, port: u16, grad: Msg) -> Result<(), OpError> {
        let Some(&(mut at, mut out)) = self.spec.exits.get(usize::from(port)) else {
            let len = self.spec.exits.len();
            return Err(OpError::OutOfRange { what: "chain output port", index: i64::from(port), len });
        };
        let mut grad = grad;
        for _ in 0..self.spec.members.len() {
            let (input, next_grad) = self.step(cx, at, false, out, grad)?;
            match self.spec.parent.get(at).copied().flatten() {
                Some((parent, parent_port)) => (at, out, grad) = (parent, parent_port, next_grad),
                None => {
                    cx.backward(input, next_grad);
                    return Ok(());
                }
            }
        }
        Err(OpError::Unsupported { op: "a chain whose members do not lead back to its root (internal)" })
    }

    fn held(&self) -> usize {
        self.ops.iter().map(|op| op.held()).sum()
    }
}
