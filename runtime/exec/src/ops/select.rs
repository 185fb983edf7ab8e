//! Selection by value: `top_k` (the largest elements, a differentiable payload) and
//! `state_from_payload` (an index computed from a vector written into a state field, not
//! differentiable). Both order values as the reference evaluator does
//! ([`kernels::larger_first`]: largest first, the lower index first among equals, NaN
//! last).

use super::{set_field, Join, Keyed, NodeCx, NodeOp};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Msg, Payload};
use amp_ir::{FieldId, PayloadInt, PayloadTy};

/// The length of a vector port.
fn vector_len(ty: Option<&PayloadTy>) -> usize {
    match ty {
        Some(PayloadTy::F32(dims)) => dims.iter().product::<u64>() as usize,
        _ => 0,
    }
}

/// `top_k K`: the `min(K, n)` largest elements, largest first; backward scatters the
/// gradient to the chosen positions.
pub(crate) struct TopKOp {
    k: usize,
    n: usize,
    chosen: Keyed<Vec<usize>>,
}

impl TopKOp {
    pub fn new(k: usize, node: &NodeInfo) -> TopKOp {
        TopKOp { k, n: vector_len(node.inputs.first()), chosen: Keyed::new() }
    }
}

impl NodeOp for TopKOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let x = msg.payload.values();
        let order = amp_ir::order::top_k_order(x, self.k);
        let y = order.iter().map(|&i| x[i]).collect();
        if cx.training() {
            self.chosen.put(cx.key(&msg.state), order)?;
        }
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let order = self.chosen.take(&cx.key(&grad.state))?;
        let mut dx = vec![0.0; self.n];
        for (&i, &g) in order.iter().zip(grad.payload.values()) {
            dx[i] += g;
        }
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.chosen.len()
    }
}

/// What training keeps of one `state_from_payload` until its gradient: the value the
/// field had, and the vector message's state (its zero gradient goes back with it).
struct Written {
    old: i64,
    vector_state: Box<[i64]>,
}

/// `state_from_payload %f := argmax | top_k K [SLOT]`: joins the vector (port 0) and the
/// value (port 1) by key and passes the value on with `%f` := the index computed from the
/// vector. Backward restores `%f`; the vector gets a zero gradient.
pub(crate) struct StateFromPayloadOp {
    field: usize,
    int: PayloadInt,
    n: usize,
    join: Join,
    /// Keyed by the node's key of the *updated* state, which the gradient arrives with.
    written: Keyed<Written>,
}

impl StateFromPayloadOp {
    pub fn new(field: FieldId, int: PayloadInt, node: &NodeInfo) -> StateFromPayloadOp {
        StateFromPayloadOp {
            field: usize::from(field.0),
            int,
            n: vector_len(node.inputs.first()),
            join: Join::new(2),
            written: Keyed::new(),
        }
    }

    /// The index the vector `v` gives, `state` being the value's state.
    fn index(&self, cx: &NodeCx, v: &[f32], state: &[i64]) -> Result<usize, OpError> {
        match &self.int {
            PayloadInt::Argmax => amp_ir::order::argmax(v).ok_or(OpError::Empty { what: "argmax" }),
            PayloadInt::TopK { k, slot } => {
                let k = (*k as usize).min(v.len());
                let s = cx.eval_index(slot, state, "top_k slot", k)?;
                let order = amp_ir::order::top_k_order(v, k);
                Ok(order[s])
            }
        }
    }
}

impl NodeOp for StateFromPayloadOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let key = cx.key(&msg.state);
        let Some((_, mut both)) = self.join.offer(key, usize::from(port), msg)? else { return Ok(()) };
        let (Some(mut value), Some(vector)) = (both.pop(), both.pop()) else { return Ok(()) };
        let index = self.index(cx, vector.payload.values(), &value.state)?;
        let old = set_field(&mut value.state, self.field, index as i64)?;
        if cx.training() {
            self.written.put(cx.key(&value.state), Written { old, vector_state: vector.state })?;
        }
        cx.forward(0, value);
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, mut grad: Msg) -> Result<(), OpError> {
        let Written { old, vector_state } = self.written.take(&cx.key(&grad.state))?;
        set_field(&mut grad.state, self.field, old)?;
        cx.backward(0, Msg::new(Payload::from_vec(vec![0.0; self.n]), vector_state));
        cx.backward(1, grad);
        Ok(())
    }

    fn held(&self) -> usize {
        self.join.len() + self.written.len()
    }
}
