//! `concat` (joins its inputs by key) and `split` (joins its outputs' gradients by key),
//! both along the last (only) dimension.

use super::{Join, NodeCx, NodeOp};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Msg, Payload};

/// The widths of the ports' payloads.
fn widths(ports: &[amp_ir::PayloadTy]) -> Vec<usize> {
    ports.iter().map(|t| t.elements() as usize).collect()
}

pub(crate) struct ConcatOp {
    widths: Vec<usize>,
    join: Join,
}

impl ConcatOp {
    pub fn new(node: &NodeInfo) -> ConcatOp {
        let widths = widths(&node.inputs);
        let join = Join::new(widths.len());
        ConcatOp { widths, join }
    }
}

impl NodeOp for ConcatOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let key = cx.key(&msg.state);
        let Some((_, parts)) = self.join.offer(key, usize::from(port), msg)? else { return Ok(()) };
        let mut values = Vec::with_capacity(self.widths.iter().sum());
        for part in &parts {
            values.extend_from_slice(part.payload.values());
        }
        let Some(first) = parts.into_iter().next() else { return Ok(()) };
        cx.forward(0, first.with_payload(Payload::from_vec(values)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let dy = grad.payload.values();
        let mut start = 0;
        for (port, &w) in self.widths.iter().enumerate() {
            let part = dy.get(start..start + w).ok_or(OpError::PayloadSize { expected: start + w, found: dy.len() })?;
            cx.backward(port as u16, grad.sibling(Payload::from_vec(part.to_vec())));
            start += w;
        }
        Ok(())
    }

    fn held(&self) -> usize {
        self.join.len()
    }
}

pub(crate) struct SplitOp {
    parts: usize,
    width: usize,
    grads: Join,
}

impl SplitOp {
    pub fn new(parts: usize, node: &NodeInfo) -> SplitOp {
        let total = node.inputs.first().map_or(0, |t| t.elements() as usize);
        let width = total.checked_div(parts).unwrap_or(0);
        SplitOp { parts, width, grads: Join::new(parts) }
    }
}

impl NodeOp for SplitOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let x = msg.payload.values();
        for port in 0..self.parts {
            let part = x[port * self.width..(port + 1) * self.width].to_vec();
            cx.forward(port as u16, msg.sibling(Payload::from_vec(part)));
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, port: u16, grad: Msg) -> Result<(), OpError> {
        let key = cx.key(&grad.state);
        let Some((_, parts)) = self.grads.offer(key, usize::from(port), grad)? else { return Ok(()) };
        let mut dx = Vec::with_capacity(self.parts * self.width);
        for part in &parts {
            dx.extend_from_slice(part.payload.values());
        }
        let Some(first) = parts.into_iter().next() else { return Ok(()) };
        cx.backward(0, first.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.grads.len()
    }
}
