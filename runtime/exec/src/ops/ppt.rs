//! Parameterized payload transforms: `linear` and `embedding`. They read their group's
//! tensors under its lock and accumulate gradients into its accumulators; the group's
//! owner applies the updates (see `train`).

use super::{Keyed, NodeCx, NodeOp};
use crate::error::OpError;
use crate::kernels;
use crate::message::{Msg, Payload};
use crate::program::NodeInfo;
use crate::train::ParamAccess;
use amp_ir::{PayloadTy, StateExpr};

fn last_dim(ty: Option<&PayloadTy>) -> usize {
    match ty {
        Some(PayloadTy::F32(dims) | PayloadTy::Batch(dims)) => dims.last().copied().unwrap_or(1) as usize,
        _ => 0,
    }
}

/// `y = x W^T + b` over the last dimension; caches `x` under the key for the backward.
pub(crate) struct LinearOp {
    group: usize,
    inp: usize,
    out: usize,
    cache: Keyed<Payload>,
}

impl LinearOp {
    pub fn new(node: &NodeInfo, access: &ParamAccess) -> Result<LinearOp, OpError> {
        let group = node.group.ok_or(OpError::Unsupported { op: "linear without parameters" })?;
        let inp = last_dim(node.inputs.first());
        let out = last_dim(node.outputs.first());
        // The verifier checked the shapes; this guards the indexing below all the same.
        let view = access.group(group);
        if view.value(0).len() != inp * out || view.value(1).len() != out {
            return Err(OpError::PayloadSize { expected: inp * out, found: view.value(0).len() });
        }
        Ok(LinearOp { group, inp, out, cache: Keyed::new() })
    }
}

impl NodeOp for LinearOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let y = {
            let view = cx.params().group(self.group);
            kernels::linear_forward(msg.payload.values(), view.value(0), view.value(1), self.inp, self.out)
        };
        if cx.training() {
            self.cache.put(cx.key(&msg.state), msg.payload.clone())?;
        }
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let x = self.cache.take(&cx.key(&grad.state))?;
        let rows = x.values().len() / self.inp.max(1);
        if grad.payload.values().len() != rows * self.out {
            return Err(OpError::PayloadSize { expected: rows * self.out, found: grad.payload.values().len() });
        }
        let dx = {
            let mut view = cx.params().group(self.group);
            match view.linear_parts() {
                Some((w, _, dw, db)) => {
                    kernels::linear_backward(x.values(), grad.payload.values(), w, dw, db, self.inp, self.out)
                }
                None => vec![0.0; x.values().len()],
            }
        };
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.cache.len()
    }
}

/// Row `index` of the table; the backward adds the gradient into that row (recomputing
/// the index from the backward message's state, which equals the forward one's).
pub(crate) struct EmbeddingOp {
    group: usize,
    index: StateExpr,
    dim: usize,
    rows: usize,
}

impl EmbeddingOp {
    pub fn new(node: &NodeInfo, index: StateExpr, access: &ParamAccess) -> Result<EmbeddingOp, OpError> {
        let group = node.group.ok_or(OpError::Unsupported { op: "embedding without parameters" })?;
        let dim = last_dim(node.outputs.first());
        let len = access.group(group).value(0).len();
        let rows = len.checked_div(dim).unwrap_or(0);
        Ok(EmbeddingOp { group, index, dim, rows })
    }

    fn row(&self, cx: &NodeCx, state: &[i64]) -> Result<usize, OpError> {
        cx.eval_index(&self.index, state, "embedding index", self.rows)
    }
}

impl NodeOp for EmbeddingOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let row = self.row(cx, &msg.state)?;
        let values = cx.params().group(self.group).value(0)[row * self.dim..(row + 1) * self.dim].to_vec();
        cx.forward(0, msg.with_payload(Payload::from_vec(values)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let row = self.row(cx, &grad.state)?;
        {
            let mut view = cx.params().group(self.group);
            if let Some((_, acc)) = view.value_and_grad(0) {
                kernels::axpy(1.0, grad.payload.values(), &mut acc[row * self.dim..(row + 1) * self.dim]);
            }
        }
        cx.backward(0, grad.with_payload(Payload::Unit));
        Ok(())
    }
}
