//! A fusion group run as one node: its elementwise nodes' work in one call of the kernel
//! `amp_jit` compiled for it (see `crate::load::fuse`, which puts this node in the group's
//! place).
//!
//! Input port `p` is one distinct source port feeding the group; each kernel input is
//! one such port's payload or a slice of it (the part of an absorbed split), output port
//! `j` kernel output `j`. Forward: the inputs of a key are joined;
//! every key completed by a batch of messages becomes one row of a single kernel call
//! (dynamic batching, like `linear`'s rows), and training keeps the input payloads (shared,
//! not copied) with their states under the key, and the kernel's saving forward keeps the
//! row's `sigmoid`, `tanh`, `exp` and `log` values. Backward: once the summed gradients of
//! all outputs of a key arrived, the kernel's backward recomputes the other forward values
//! from the kept inputs and values (bit for bit what recomputing them all gives: the saved
//! values come from the same code; reading a saved value is much cheaper than computing a
//! transcendental function again, for a small cost in the forward) and returns one
//! gradient per input, the sum over every use of that input inside the group; port `p`'s
//! gradient (its kernel inputs' gradients at their offsets) goes back with port `p`'s
//! forward state.
//!
//! A group's payloads are `f32[..]` tensors (one row of `n`) or scalars (one value); in a
//! group of batches (a batched map's elementwise chain, `FusedGroup::batch`) a message's
//! vectors hold any number of rows, all of them rows of the same kernel call, and a
//! scalar input (a constant) is repeated for each of its key's rows (its gradient is the
//! sum over them). In any group, a part of an absorbed split (a Tree-LSTM cell's gates,
//! a GRU's) is a column block of every row of its port ([`Block`]), which the kernel reads
//! in place, strided (`amp_jit::Rows`), when the keys' rows of that port are one range of
//! a buffer (one key, or the pieces of one batch in order: a Linear's rows), and gathered
//! into a packed buffer otherwise. Training keeps the port's payload, and the backward
//! reads its blocks the same way. The port's gradient is the parts' gradients written at
//! their columns, zeros in the columns of a part the group does not read, in one buffer
//! for all keys of the call.

use super::{Intake, Join, Keyed, NodeCx, NodeOp};
use crate::error::OpError;
use crate::load::program::FusedGroup;
use crate::message::{Key, Msg, Payload};
use amp_jit::{Pass, Rows, Width};
use std::borrow::Cow;
use std::sync::Arc;

/// What training keeps per key for the backward pass: the input messages and the row
/// of values the kernel's saving forward kept (`Kernel::saved_per_row`: its `sigmoid`,
/// `tanh`, `exp` and `log` values, which the backward then reads instead of computing
/// them again; empty for a kernel without any).
struct Saved {
    inputs: Vec<Msg>,
    values: Payload,
}

/// One buffer of a kernel call: borrowed or stacked values, and the row stride of a
/// [`Block`] read in place.
struct Buffer<'a> {
    values: Cow<'a, [f32]>,
    stride: Option<usize>,
}

impl<'a> Buffer<'a> {
    fn packed(values: Cow<'a, [f32]>) -> Buffer<'a> {
        Buffer { values, stride: None }
    }

    /// `block`'s columns of the port rows `values`, in place: from the block's first
    /// column on, rows a port row apart.
    fn block(values: &'a [f32], block: Block) -> Result<Buffer<'a>, OpError> {
        block.check(values)?;
        Ok(Buffer { values: Cow::Borrowed(values.get(block.offset..).unwrap_or(&[])), stride: Some(block.stride) })
    }

    fn rows(&self) -> Rows<'_> {
        match self.stride {
            Some(stride) => Rows::strided(&self.values, stride),
            None => Rows::packed(&self.values),
        }
    }
}

/// The saved values of a call: none (the plain functions), written by a forward, or read
/// by a backward.
enum SavedValues<'a> {
    None,
    Write(&'a mut Vec<f32>),
    Read(&'a [f32]),
}

/// A call's inputs: per key, its kernel inputs; per kernel input, all keys' rows in place
/// when they are one range of a buffer (see [`FusedOp::call`]).
type KernelArgs<'a> = (&'a [Vec<&'a [f32]>], &'a [Option<&'a [f32]>]);

pub(crate) struct FusedOp {
    group: Arc<FusedGroup>,
    /// f32s per row of each kernel input and output.
    input_widths: Vec<usize>,
    output_widths: Vec<usize>,
    /// Per input port, the kernel input that alone reads all of it (not an absorbed split).
    whole_input: Vec<Option<usize>>,
    /// Per kernel input, whether it is a scalar (one value per row).
    scalar_input: Vec<bool>,
    /// Per vector kernel input, the columns of its port's rows it reads when not all of
    /// them (a part of an absorbed split).
    blocks: Vec<Option<Block>>,
    /// Per kernel input, the f32s per row of what [`FusedOp::kernel_inputs`] gives for
    /// it: the port's whole rows in a group of batches, the input's own otherwise.
    read_widths: Vec<usize>,
    forward_join: Join,
    backward_join: Join,
    saved: Keyed<Saved>,
}

impl FusedOp {
    pub fn new(group: Arc<FusedGroup>) -> FusedOp {
        let spec = group.kernel.spec();
        let width = |w: Width| if w == Width::Vector { spec.n() } else { 1 };
        let input_widths: Vec<usize> = spec.inputs().iter().map(|&w| width(w)).collect();
        let output_widths: Vec<usize> = spec.output_widths().map(width).collect();
        let whole_input = (0..group.port_widths.len())
            .map(|port| {
                let mut reading = group.slices.iter().enumerate().filter(|(_, slice)| slice.port == port);
                match (reading.next(), reading.next()) {
                    (Some((i, slice)), None) if slice.offset == 0 && input_widths[i] == group.port_widths[port] => {
                        Some(i)
                    }
                    _ => None,
                }
            })
            .collect();
        let scalar_input: Vec<bool> = spec.inputs().iter().map(|&w| w == Width::Scalar).collect();
        let port_width = |port: usize| group.port_widths.get(port).copied().unwrap_or(0);
        let blocks: Vec<Option<Block>> = group
            .slices
            .iter()
            .zip(&input_widths)
            .zip(&scalar_input)
            .map(|((slice, &width), &scalar)| {
                let stride = port_width(slice.port);
                let partial = slice.offset != 0 || width != stride;
                (!scalar && partial).then_some(Block { offset: slice.offset, width, stride })
            })
            .collect();
        let read_widths = group
            .slices
            .iter()
            .zip(&input_widths)
            .zip(&blocks)
            .map(|((slice, &width), block)| if group.batch || block.is_some() { port_width(slice.port) } else { width })
            .collect();
        FusedOp {
            whole_input,
            scalar_input,
            blocks,
            read_widths,
            forward_join: Join::new(group.port_widths.len()),
            backward_join: Join::new(output_widths.len()),
            input_widths,
            output_widths,
            saved: Keyed::new(),
            group,
        }
    }

    /// The buffers of one kernel call over the rows of every key: key `k` brings
    /// `counts[k]` rows (one but in a group of batches), buffer `b` of it is `args[k][b]`
    /// (a kernel input's scalar, one value, stands for each of the key's rows; a
    /// [`Block`]'s port rows, of which it takes its columns), or, where `in_place[b]` has
    /// them, the rows of all keys as one range of a buffer (the pieces of an earlier
    /// batch, read without a copy).
    fn stack<'a>(&self, (args, in_place): KernelArgs<'a>, counts: &[usize]) -> Result<Vec<Buffer<'a>>, OpError> {
        let buffers = args.first().map_or(0, Vec::len);
        (0..buffers).map(|b| self.buffer(b, (args, in_place), counts)).collect()
    }

    /// One kernel call on `rows` rows of `inputs` (see [`FusedOp::stack`]); returns its
    /// outputs (forward) or input gradients (backward), each `rows × width` values.
    fn call(&self, pass: Pass, inputs: &[Buffer], rows: usize, saved: SavedValues) -> Result<Vec<Vec<f32>>, OpError> {
        let inputs: Vec<Rows> = inputs.iter().map(Buffer::rows).collect();
        // New output buffers, not zeroed: the kernel writes every value.
        let kernel = &self.group.kernel;
        let done = match (pass, saved) {
            (Pass::Forward, SavedValues::Write(values)) => {
                kernel.forward_new(rows, &inputs, true).map(|(out, kept)| {
                    *values = kept;
                    out
                })
            }
            (Pass::Forward, _) => kernel.forward_new(rows, &inputs, false).map(|(out, _)| out),
            (Pass::Backward, SavedValues::Read(values)) => kernel.backward_new(rows, &inputs, Some(values)),
            (Pass::Backward, _) => kernel.backward_new(rows, &inputs, None),
        };
        done.map_err(|e| OpError::Kernel { message: e.to_string() })
    }

    /// Buffer `b` of a call (see [`FusedOp::stack`]): borrowed where one key's values or
    /// the in-place range are already what the kernel reads (a block's columns strided),
    /// else the keys' rows stacked (scalars repeated per row, blocks gathered).
    fn buffer<'a>(&self, b: usize, (args, in_place): KernelArgs<'a>, counts: &[usize]) -> Result<Buffer<'a>, OpError> {
        // A block's keys are in place whenever they are one range (`FusedOp::in_place`), a
        // single key's among them.
        let block = self.blocks.get(b).copied().flatten();
        if let Some(all) = in_place.get(b).copied().flatten() {
            return match block {
                Some(block) => Buffer::block(all, block),
                None => Ok(Buffer::packed(Cow::Borrowed(all))),
            };
        }
        let repeats = self.scalar_input.get(b).copied().unwrap_or(false);
        if let ([key], [count], None) = (args, counts, block) {
            if *count == 1 || !repeats {
                return Ok(Buffer::packed(Cow::Borrowed(key[b])));
            }
        }
        // Sized once: growing by doubling would copy the rows again.
        let rows: usize = counts.iter().sum();
        // Buffers past the kernel inputs are the backward's output gradients.
        let widths = self.input_widths.iter().chain(&self.output_widths);
        let width = widths.copied().nth(b).unwrap_or(0);
        let mut all = Vec::with_capacity(rows.saturating_mul(width));
        for (key, &count) in args.iter().zip(counts) {
            match (key[b], block) {
                ([value], _) if repeats => all.extend(std::iter::repeat_n(*value, count)),
                (values, Some(block)) => block.gather(values, &mut all)?,
                (values, None) => all.extend_from_slice(values),
            }
        }
        Ok(Buffer::packed(Cow::Owned(all)))
    }

    /// Per kernel input, the rows of every key in place (see [`FusedOp::call`]) when the
    /// input reads its port whole (one row per key, or a vector input of a group of
    /// batches) or is a [`Block`] of it, and the keys' payloads of that port are
    /// consecutive pieces of one buffer.
    fn in_place<'m>(&self, keys: &'m [&'m [Msg]]) -> Vec<Option<&'m [f32]>> {
        let group = &self.group;
        group
            .slices
            .iter()
            .enumerate()
            .map(|(i, slice)| {
                // A scalar of a group of batches is repeated per row, not read in place.
                let repeated = group.batch && self.scalar_input.get(i).copied().unwrap_or(true);
                let whole = !repeated && self.whole_input.get(slice.port).copied().flatten() == Some(i)
                    || self.blocks.get(i).is_some_and(Option::is_some);
                let payloads = keys.iter().map(|msgs| msgs.get(slice.port).map(|m| &m.payload));
                whole.then(|| payloads.collect::<Option<Vec<&Payload>>>()).flatten().and_then(Payload::contiguous)
            })
            .collect()
    }

    /// Runs the forward of every completed key as one call and emits its outputs, each
    /// output one buffer shared by the keys' messages (`Payload::pieces`).
    fn forward_rows(&mut self, cx: &mut NodeCx, ready: Vec<(Key, Vec<Msg>)>) -> Result<(), OpError> {
        if ready.is_empty() {
            return Ok(());
        }
        let args = ready.iter().map(|(_, msgs)| self.kernel_inputs(msgs)).collect::<Result<Vec<_>, _>>()?;
        let counts = args.iter().map(|a| self.rows_of(a, &self.read_widths)).collect::<Result<Vec<_>, _>>()?;
        let keys: Vec<&[Msg]> = ready.iter().map(|(_, msgs)| msgs.as_slice()).collect();
        let in_place = self.in_place(&keys);
        let per_row = self.group.kernel.saved_per_row();
        let mut kept = Vec::new();
        let saving = if cx.training() && per_row > 0 { SavedValues::Write(&mut kept) } else { SavedValues::None };
        let inputs = self.stack((&args, &in_place), &counts)?;
        let rows = counts.iter().sum();
        let outputs = self.call(Pass::Forward, &inputs, rows, saving)?;
        drop(inputs);
        let mut outputs: Vec<std::vec::IntoIter<Payload>> = outputs
            .into_iter()
            .zip(&self.output_widths)
            .map(|(values, &w)| pieces(values, &counts, w).into_iter())
            .collect();
        let mut kept = pieces(kept, &counts, per_row).into_iter();
        for (key, msgs) in ready {
            for (j, values) in outputs.iter_mut().enumerate() {
                let from = self.group.state_from.get(j).copied().unwrap_or(0);
                let state = msgs.get(from).or(msgs.first()).map(|m| m.state.clone()).unwrap_or_default();
                let payload = values.next().unwrap_or(Payload::Unit);
                cx.forward(j as u16, Msg::new(payload, state));
            }
            let values = kept.next().unwrap_or(Payload::Unit);
            if cx.training() {
                self.saved.put(key, Saved { inputs: msgs, values })?;
            }
        }
        Ok(())
    }

    /// Runs the backward of every key whose output gradients are all in, as one call;
    /// a port read whole takes its piece of one buffer shared by the keys' gradients.
    fn backward_rows(&mut self, cx: &mut NodeCx, ready: Vec<(Key, Vec<Msg>)>) -> Result<(), OpError> {
        if ready.is_empty() {
            return Ok(());
        }
        let mut saved = Vec::with_capacity(ready.len());
        for (key, _) in &ready {
            saved.push(self.saved.take(key)?);
        }
        let mut rows = Vec::with_capacity(ready.len());
        let mut counts = Vec::with_capacity(ready.len());
        for ((_, grads), s) in ready.iter().zip(&saved) {
            let mut row = self.kernel_inputs(&s.inputs)?;
            let count = self.rows_of(&row, &self.read_widths)?;
            for (g, &w) in grads.iter().zip(&self.output_widths) {
                if g.payload.values().len() != count * w {
                    return Err(OpError::PayloadSize { expected: count * w, found: g.payload.values().len() });
                }
            }
            row.extend(grads.iter().map(|g| g.payload.values()));
            rows.push(row);
            counts.push(count);
        }
        // The forward's inputs in place as the forward read them, then each output's
        // gradients (read whole, one piece per key) in place where they are one range.
        let inputs: Vec<&[Msg]> = saved.iter().map(|s| s.inputs.as_slice()).collect();
        let mut in_place = self.in_place(&inputs);
        in_place.extend((0..self.output_widths.len()).map(|j| {
            let grads = ready.iter().map(|(_, grads)| grads.get(j).map(|g| &g.payload));
            grads.collect::<Option<Vec<&Payload>>>().and_then(Payload::contiguous)
        }));
        // The saved values of every row, stacked, when every row has its own.
        let per_row = self.group.kernel.saved_per_row();
        let complete = saved.iter().zip(&counts).all(|(s, &count)| s.values.values().len() == count * per_row);
        let all_saved = match saved.as_slice() {
            _ if per_row == 0 || !complete => None,
            [one] => Some(Cow::Borrowed(one.values.values())),
            all => Some(Payload::contiguous(all.iter().map(|s| &s.values)).map_or_else(
                || {
                    let mut stacked = Vec::with_capacity(all.iter().map(|s| s.values.values().len()).sum());
                    all.iter().for_each(|s| stacked.extend_from_slice(s.values.values()));
                    Cow::Owned(stacked)
                },
                Cow::Borrowed,
            )),
        };
        let from_saved = all_saved.as_deref().map_or(SavedValues::None, SavedValues::Read);
        let stacked = self.stack((&rows, &in_place), &counts)?;
        let total = counts.iter().sum();
        let mut grads = self.call(Pass::Backward, &stacked, total, from_saved)?;
        drop((stacked, all_saved));
        let group = &self.group;
        // Per port, one piece per key: a port read whole by one vector kernel input gets
        // that input's gradients; a port read in parts (an absorbed split) its parts'
        // gradients at their columns, every key's rows in one buffer (a part the group
        // does not read stays zero). A scalar repeated per row of a batch has none here.
        let mut per_port: Vec<Option<std::vec::IntoIter<Payload>>> = Vec::with_capacity(group.port_widths.len());
        for (port, &width) in group.port_widths.iter().enumerate() {
            let values = match self.whole_input.get(port).copied().flatten() {
                Some(i) if group.batch && self.scalar_input.get(i).copied().unwrap_or(false) => None,
                Some(i) => grads.get_mut(i).map(std::mem::take),
                None => Some(self.assemble(port, width, total, &grads)?),
            };
            per_port.push(values.map(|values| pieces(values, &counts, width).into_iter()));
        }
        let mut start = 0;
        for (s, &count) in saved.into_iter().zip(&counts) {
            for (port, input) in s.inputs.into_iter().enumerate() {
                if let Some(piece) = per_port.get_mut(port).and_then(Option::as_mut) {
                    cx.backward(port as u16, input.with_payload(piece.next().unwrap_or(Payload::Unit)));
                } else if let Some(i) = self.whole_input.get(port).copied().flatten() {
                    // A scalar repeated for each row of a batch: the sum of its rows'
                    // gradients.
                    let grad = vec![grads[i][start..start + count].iter().sum::<f32>()];
                    cx.backward(port as u16, input.with_payload(Payload::from_vec(grad)));
                }
            }
            start += count;
        }
        Ok(())
    }

    /// The gradient of input port `port`, `rows` rows of `width`, read in parts by the
    /// kernel inputs: each part's gradients (`grads`, per kernel input) written at its
    /// columns of every row, zeros elsewhere.
    fn assemble(&self, port: usize, width: usize, rows: usize, grads: &[Vec<f32>]) -> Result<Vec<f32>, OpError> {
        let mut parts: Vec<(usize, usize, &[f32])> = Vec::new();
        for ((slice, part), &w) in self.group.slices.iter().zip(grads).zip(&self.input_widths) {
            if slice.port != port || w == 0 {
                continue;
            }
            if slice.offset + w > width || part.len() != rows * w {
                return Err(OpError::PayloadSize { expected: rows * w, found: part.len() });
            }
            parts.push((slice.offset, w, part));
        }
        parts.sort_unstable_by_key(|&(offset, _, _)| offset);
        let mut end = 0;
        let tiles =
            parts.iter().all(|&(offset, w, _)| std::mem::replace(&mut end, offset + w) == offset) && end == width;
        if tiles {
            // Every column read once (a GRU's gates): the rows written in order, no zeros.
            let mut grad = Vec::with_capacity(rows * width);
            for r in 0..rows {
                for &(_, w, part) in &parts {
                    grad.extend_from_slice(&part[r * w..(r + 1) * w]);
                }
            }
            return Ok(grad);
        }
        let mut grad = vec![0.0; rows * width];
        for &(offset, w, part) in &parts {
            for (dst, src) in grad.chunks_exact_mut(width).zip(part.chunks_exact(w)) {
                dst[offset..offset + w].copy_from_slice(src);
            }
        }
        Ok(grad)
    }

    /// The rows a key's kernel inputs bring: one, but in a group of batches, where every
    /// vector input must hold the same number of rows (a scalar stands for each).
    fn rows_of(&self, inputs: &[&[f32]], widths: &[usize]) -> Result<usize, OpError> {
        if !self.group.batch {
            return Ok(1);
        }
        let mut rows = None;
        for ((values, &w), &scalar) in inputs.iter().zip(widths).zip(&self.scalar_input) {
            if scalar || w == 0 {
                continue;
            }
            let count = values.len() / w;
            let expected = rows.unwrap_or(count) * w;
            if values.len() != expected {
                return Err(OpError::PayloadSize { expected, found: values.len() });
            }
            rows.get_or_insert(count);
        }
        Ok(rows.unwrap_or(1))
    }

    /// One row of kernel inputs: each kernel input's slice of the joined port payloads;
    /// for a [`Block`] the port's whole row, in a group of batches all the port's rows
    /// (the block takes its columns later).
    fn kernel_inputs<'m>(&self, msgs: &'m [Msg]) -> Result<Vec<&'m [f32]>, OpError> {
        self.group
            .slices
            .iter()
            .zip(&self.input_widths)
            .enumerate()
            .map(|(i, (slice, &w))| {
                let values = msgs.get(slice.port).map_or(&[][..], |m| m.payload.values());
                if self.group.batch {
                    return Ok(values);
                }
                // A block of one row: the port's whole row, which must be all there is.
                if let Some(width) = self.blocks.get(i).copied().flatten().map(|b| b.stride) {
                    return match values.len() == width {
                        true => Ok(values),
                        false => Err(OpError::PayloadSize { expected: width, found: values.len() }),
                    };
                }
                values
                    .get(slice.offset..slice.offset + w)
                    .ok_or(OpError::PayloadSize { expected: slice.offset + w, found: values.len() })
            })
            .collect()
    }
}

/// A kernel's output (`w` values per row) as one payload per key of `counts` rows, all
/// sharing its buffer.
fn pieces(values: Vec<f32>, counts: &[usize], w: usize) -> Vec<Payload> {
    let lens: Vec<usize> = counts.iter().map(|&c| c * w).collect();
    Payload::pieces(values, &lens)
}

/// The columns `[offset, offset + width)` of every row of a port whose rows are `stride`
/// wide: a part of an absorbed split.
#[derive(Clone, Copy, Debug)]
struct Block {
    offset: usize,
    width: usize,
    stride: usize,
}

impl Block {
    /// Rows that do not fit the block are an error (the worker checks payloads against
    /// their ports only per row).
    fn check(&self, values: &[f32]) -> Result<(), OpError> {
        let Block { offset, width, stride } = *self;
        if stride == 0 || offset + width > stride || !values.len().is_multiple_of(stride) {
            let expected = values.len().next_multiple_of(stride.max(1));
            return Err(OpError::PayloadSize { expected, found: values.len() });
        }
        Ok(())
    }

    /// Appends the block of every row of `values` to `out`.
    fn gather(&self, values: &[f32], out: &mut Vec<f32>) -> Result<(), OpError> {
        self.check(values)?;
        let Block { offset, width, stride } = *self;
        out.reserve(values.len() / stride * width);
        for row in values.chunks_exact(stride) {
            out.extend_from_slice(&row[offset..offset + width]);
        }
        Ok(())
    }
}

impl NodeOp for FusedOp {
    /// A kernel call costs little more per message alone than in a batch; holding fused
    /// work back would delay the Linear messages it feeds, and they gain far more from
    /// batching: it does not wait.
    fn intake(&self) -> Intake {
        Intake::Batches { waits: false }
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let ready = self.forward_join.complete(cx, port, msgs)?;
        self.forward_rows(cx, ready)
    }

    fn backward_batch(&mut self, cx: &mut NodeCx, port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let ready = self.backward_join.complete(cx, port, grads)?;
        self.backward_rows(cx, ready)
    }

    fn held(&self) -> usize {
        self.forward_join.len() + self.backward_join.len() + self.saved.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_gathers_its_columns_of_every_row() {
        let block = Block { offset: 2, width: 2, stride: 6 };
        let rows: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let mut out = vec![-1.0];
        block.gather(&rows, &mut out).expect("two rows of six");
        assert_eq!(out, [-1.0, 2.0, 3.0, 8.0, 9.0]);
        block.gather(&[], &mut out).expect("no rows");
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn rows_that_do_not_fit_a_block_are_an_error() {
        let block = Block { offset: 2, width: 2, stride: 6 };
        let mut out = Vec::new();
        let error = block.gather(&[0.0; 7], &mut out).expect_err("a row and a bit");
        assert!(matches!(error, OpError::PayloadSize { expected: 12, found: 7 }), "{error:?}");
        let past_the_row = Block { offset: 5, width: 2, stride: 6 };
        assert!(past_the_row.gather(&[0.0; 6], &mut out).is_err());
        let empty_rows = Block { offset: 0, width: 1, stride: 0 };
        assert!(empty_rows.gather(&[0.0; 3], &mut out).is_err());
        assert!(out.is_empty(), "nothing appended on an error");
    }
}
