//! `concat` (joins its inputs by key) and `split` (joins its outputs' gradients by key),
//! both along the last (only) dimension: of a vector, or of every row of a batch (a
//! batched map's body), a vector being a batch of one row.

use super::{Intake, Join, NodeCx, NodeOp, Stacked};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Key, Msg, Payload};

/// The parts of every completed key joined by `join_rows` into one buffer (`Stacked`):
/// each key's first part, whose state the result takes, with its piece of it.
fn joined(
    ready: Vec<(Key, Vec<Msg>)>,
    join_rows: impl Fn(&[Msg], &mut Vec<f32>) -> Result<(), OpError>,
) -> Result<Vec<(Msg, Payload)>, OpError> {
    let values = ready.iter().flat_map(|(_, parts)| parts).map(|m| m.payload.values().len()).sum();
    let mut all = Stacked::with_capacity(values);
    for (_, parts) in &ready {
        let mut done = Ok(());
        all.push(|values| done = join_rows(parts, values));
        done?;
    }
    let mut pieces = all.payloads();
    // Each key took a piece, whether or not it has a first part (a join's keys always do).
    let firsts = ready.into_iter().map(|(_, parts)| (parts.into_iter().next(), pieces.next()));
    Ok(firsts.filter_map(|(first, piece)| Some((first?, piece.unwrap_or(Payload::Unit)))).collect())
}

/// The widths of the ports' payloads.
fn widths(ports: &[amp_ir::PayloadTy]) -> Vec<usize> {
    ports.iter().map(|t| t.elements() as usize).collect()
}

/// The rows every part holds (one for vectors), the same in all of them: parts of one key
/// with different row counts are an error, not a panic.
fn row_count(parts: &[Msg], widths: &[usize], batch: bool) -> Result<usize, OpError> {
    if !batch {
        // The worker checked each vector against its port's width.
        return Ok(1);
    }
    let mut rows = None;
    for (part, &w) in parts.iter().zip(widths) {
        let len = part.payload.values().len();
        if w == 0 {
            continue;
        }
        let r = len.checked_div(w).unwrap_or(0);
        let expected = rows.map_or(r * w, |rows: usize| rows * w);
        if len != expected {
            return Err(OpError::PayloadSize { expected, found: len });
        }
        rows.get_or_insert(r);
    }
    Ok(rows.unwrap_or(0))
}

pub(crate) struct ConcatOp {
    widths: Vec<usize>,
    batch: bool,
    join: Join,
}

fn is_batch(ports: &[amp_ir::PayloadTy]) -> bool {
    matches!(ports.first(), Some(amp_ir::PayloadTy::Batch(_)))
}

impl ConcatOp {
    pub fn new(node: &NodeInfo) -> ConcatOp {
        let widths = widths(&node.inputs);
        let join = Join::new(widths.len());
        ConcatOp { widths, batch: is_batch(&node.inputs), join }
    }
}

impl ConcatOp {
    /// Appends the rows of a completed key's parts, joined row by row, to `out`.
    fn join_rows(&self, parts: &[Msg], out: &mut Vec<f32>) -> Result<(), OpError> {
        let rows = row_count(parts, &self.widths, self.batch)?;
        out.reserve(rows * self.widths.iter().sum::<usize>());
        for r in 0..rows {
            for (part, &w) in parts.iter().zip(&self.widths) {
                out.extend_from_slice(&part.payload.values()[r * w..(r + 1) * w]);
            }
        }
        Ok(())
    }

    /// The rows of a gradient over the joined width; a length that is not whole rows is
    /// an error.
    fn grad_rows(&self, dy: &[f32]) -> Result<usize, OpError> {
        let total: usize = self.widths.iter().sum();
        let rows = dy.len().checked_div(total).unwrap_or(0);
        if rows * total != dy.len() || (total == 0 && !dy.is_empty()) {
            return Err(OpError::PayloadSize { expected: rows * total, found: dy.len() });
        }
        Ok(rows)
    }

    /// Appends input `port`'s columns of every row of `dy` to `out`.
    fn part_of(&self, dy: &[f32], rows: usize, port: usize, out: &mut Vec<f32>) {
        let total: usize = self.widths.iter().sum();
        let start: usize = self.widths[..port].iter().sum();
        let w = self.widths[port];
        out.reserve(rows * w);
        for r in 0..rows {
            out.extend_from_slice(&dy[r * total + start..r * total + start + w]);
        }
    }
}

impl NodeOp for ConcatOp {
    /// A concat usually feeds a Linear layer (Tree-LSTM's children, list-reduce's token
    /// and state): the keys a batch completes are joined into one buffer that the Linear
    /// reads in place, and the gradients' parts into one buffer per input.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let ready = self.join.complete(cx, port, msgs)?;
        for (first, values) in joined(ready, |parts, values| self.join_rows(parts, values))? {
            cx.forward(0, first.with_payload(values));
        }
        Ok(())
    }

    fn backward_batch(&mut self, cx: &mut NodeCx, _port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let rows = grads.iter().map(|g| self.grad_rows(g.payload.values())).collect::<Result<Vec<_>, _>>()?;
        let count: usize = rows.iter().sum();
        let mut parts: Vec<Stacked> = self.widths.iter().map(|&w| Stacked::with_capacity(count * w)).collect();
        for (grad, &rows) in grads.iter().zip(&rows) {
            for (port, out) in parts.iter_mut().enumerate() {
                out.push(|values| self.part_of(grad.payload.values(), rows, port, values));
            }
        }
        let mut parts: Vec<_> = parts.into_iter().map(Stacked::payloads).collect();
        for grad in grads {
            for (port, part) in parts.iter_mut().enumerate() {
                cx.backward(port as u16, grad.sibling(part.next().unwrap_or(Payload::Unit)));
            }
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
    batch: bool,
    grads: Join,
}

impl SplitOp {
    pub fn new(parts: usize, node: &NodeInfo) -> SplitOp {
        let total = node.inputs.first().map_or(0, |t| t.elements() as usize);
        let width = total.checked_div(parts).unwrap_or(0);
        SplitOp { parts, width, batch: is_batch(&node.inputs), grads: Join::new(parts) }
    }
}

impl SplitOp {
    /// Appends part `port` of every row of `x` to `out`.
    fn part(&self, x: &[f32], port: usize, out: &mut Vec<f32>) {
        let total = self.parts * self.width;
        let rows = x.len().checked_div(total).unwrap_or(0);
        out.reserve(rows * self.width);
        for r in 0..rows {
            let start = r * total + port * self.width;
            out.extend_from_slice(&x[start..start + self.width]);
        }
    }

    /// Appends the rows of `parts` (one key's gradients, in port order), side by side,
    /// to `out`.
    fn join_rows(&self, parts: &[Msg], out: &mut Vec<f32>) -> Result<(), OpError> {
        let widths = vec![self.width; self.parts];
        let rows = row_count(parts, &widths, self.batch)?;
        out.reserve(rows * self.parts * self.width);
        for r in 0..rows {
            for part in parts {
                out.extend_from_slice(&part.payload.values()[r * self.width..(r + 1) * self.width]);
            }
        }
        Ok(())
    }
}

impl NodeOp for SplitOp {
    /// A split of batches writes each part of all the messages it takes into one buffer
    /// (the next Linear or kernel reads them in place), and the gradients of all keys
    /// they complete into another. It takes a port's messages from anywhere in its queue,
    /// as an op that batches does: its parts' gradients arrive interleaved by port, and
    /// one port's of many keys at once then complete them together (one buffer for the
    /// Linear before, instead of a worker step and a buffer per key); it does not wait.
    fn intake(&self) -> Intake {
        if self.batch {
            Intake::Batches { waits: false }
        } else {
            Intake::One
        }
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let values: usize = msgs.iter().map(|m| m.payload.values().len()).sum();
        let part = values.checked_div(self.parts).unwrap_or(0);
        let mut parts: Vec<Stacked> = (0..self.parts).map(|_| Stacked::with_capacity(part)).collect();
        for msg in &msgs {
            for (port, out) in parts.iter_mut().enumerate() {
                out.push(|values| self.part(msg.payload.values(), port, values));
            }
        }
        let mut parts: Vec<_> = parts.into_iter().map(Stacked::payloads).collect();
        for msg in msgs {
            for (port, part) in parts.iter_mut().enumerate() {
                cx.forward(port as u16, msg.sibling(part.next().unwrap_or(Payload::Unit)));
            }
        }
        Ok(())
    }

    fn backward_batch(&mut self, cx: &mut NodeCx, port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let ready = self.grads.complete(cx, port, grads)?;
        for (first, dx) in joined(ready, |parts, values| self.join_rows(parts, values))? {
            cx.backward(0, first.with_payload(dx));
        }
        Ok(())
    }

    fn held(&self) -> usize {
        self.grads.len()
    }
}
