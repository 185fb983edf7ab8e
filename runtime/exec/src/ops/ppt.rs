//! Parameterized payload transforms: `linear`, `embedding` and `affine`. They read their group's
//! tensors under its lock and accumulate gradients into its accumulators; the group's
//! owner applies the updates (see `train`).

use super::{Intake, Keyed, NodeCx, NodeOp, Stacked};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Msg, Payload};
use crate::ops::kernels;
use crate::ops::nppt::{GradInto, MapInto};
use crate::ops::train::ParamAccess;
use amp_ir::UnaryFn;
use amp_ir::{PayloadTy, StateExpr};
use std::borrow::Cow;

fn last_dim(ty: Option<&PayloadTy>) -> usize {
    match ty {
        Some(PayloadTy::F32(dims) | PayloadTy::Batch(dims)) => dims.last().copied().unwrap_or(1) as usize,
        _ => 0,
    }
}

/// The rows from which a batch makes a stale copy of the weight again (see [`Layout`])
/// rather than taking its rows on `W` itself: making one costs about what 7 one-row
/// products do (`cargo bench -p amp-benches --bench gemm` prints both).
const LAYOUT_FROM_ROWS: usize = 8;

/// The rows a weight must have served at its current or previous version for a copy to
/// be made: making a copy reads and writes the whole weight, and it only pays back over
/// the many rows whose products then run faster on it than `kernels::skinny` on `W`
/// itself (`cargo bench -p amp-benches --bench gemm` prints both sides).
const COPY_PAYS_FROM_ROWS: usize = 64;

/// The rows from which the input gradient of a weight that is not worth copying goes
/// through `kernels::rows_times_w` rather than the GEMM crate on `W`: with a few rows
/// the crate's setup dominates; from here the dedicated kernel, which streams `W` once
/// with prefetches, is ahead on a weight out of cache (a MoE expert).
const SKINNY_DX_FROM_ROWS: usize = 4;

/// A copy of a group's weight laid out for batched GEMMs (rows padded to the GEMM's
/// panels, see [`kernels::PANEL`]), the group version it was made from, and how many rows
/// the weight served at each version. A copy pays when the weight serves many rows between
/// two updates (each of Tree-LSTM's few weights serves hundreds); a MoE expert, updated
/// after nearly every batch it sees, would make a copy for a handful of rows, and the
/// copies would cost more than the products they serve.
#[derive(Default)]
struct Layout {
    version: Option<u64>,
    values: Vec<f32>,
    /// The copy's row stride.
    ld: usize,
    /// The version whose rows `rows` counts.
    counted: Option<u64>,
    rows: usize,
    /// The rows served at the version counted before (none before the first).
    before: usize,
}

impl Layout {
    fn stale(&self, version: u64) -> bool {
        self.version != Some(version)
    }

    /// Counts a batch of `rows` served at `version`.
    fn serve(&mut self, version: u64, rows: usize) {
        if self.counted != Some(version) {
            self.before = self.rows;
            self.counted = Some(version);
            self.rows = 0;
        }
        self.rows += rows;
    }

    /// Whether a copy at this version would likely pay: the weight served
    /// `COPY_PAYS_FROM_ROWS` rows or more at this version so far or at the one before (an
    /// op is built anew for every run, so a run's first version has no history).
    fn pays(&self) -> bool {
        self.rows.max(self.before) >= COPY_PAYS_FROM_ROWS
    }

    /// Whether a batch of `rows` at `version` takes the copy: a current one always, a
    /// stale one is made again for `LAYOUT_FROM_ROWS` rows or more when it pays.
    fn takes(&self, version: u64, rows: usize) -> bool {
        !self.stale(version) || (rows >= LAYOUT_FROM_ROWS && self.pays())
    }

    /// The copy at `version`, made again by `make` (which fills the values and returns the
    /// row stride) when it is older; its values and row stride.
    fn at(&mut self, version: u64, make: impl FnOnce(&mut Vec<f32>) -> usize) -> (&[f32], usize) {
        if self.stale(version) {
            self.ld = make(&mut self.values);
            self.version = Some(version);
        }
        (&self.values, self.ld)
    }
}

/// `y = x W^T + b` over the last dimension, then its epilogue's activation `f` when it has
/// one (`crate::load::epilogue`); caches `x` under the key for the backward, with the
/// activation's input and output. Batches: the rows of several messages go through one
/// GEMM.
pub(crate) struct LinearOp {
    group: usize,
    inp: usize,
    out: usize,
    epilogue: Option<UnaryFn>,
    cache: Keyed<Saved>,
    /// `W^T: [inp, padded(out)]` for the forward of several rows
    /// (`kernels::linear_forward_t`).
    weight_t: Layout,
    /// `W: [out, padded(inp)]` for the input gradient of several rows, when `inp` is not
    /// already a multiple of the panel width.
    weight_p: Layout,
    /// Whether the input gradient can reach a parameter (`NodeInfo::grad_inputs`): when
    /// not (the input is data), the backward sends zeros instead of computing `dy W`.
    input_grad: bool,
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
        let input_grad = node.grad_inputs.first().copied().unwrap_or(true);
        Ok(LinearOp {
            group,
            inp,
            out,
            epilogue: node.epilogue.map(|e| e.f),
            cache: Keyed::new(),
            weight_t: Layout::default(),
            weight_p: Layout::default(),
            input_grad,
        })
    }
}

impl LinearOp {
    /// Rows of each payload (`f32[in]` is one row, a batch `f32[?, in]` any number).
    fn rows_of(&self, payloads: impl Iterator<Item = usize>) -> Vec<usize> {
        payloads.map(|len| len / self.inp.max(1)).collect()
    }
}

/// The payloads' values one after the other: a matrix with each payload's rows, read in
/// place when they are one range of one buffer (one payload, or the pieces of a batch
/// that an earlier node emitted, in their order: `Payload::contiguous`).
fn stack<'p>(payloads: impl Iterator<Item = &'p Payload> + Clone) -> Cow<'p, [f32]> {
    if let Some(all) = Payload::contiguous(payloads.clone()) {
        return Cow::Borrowed(all);
    }
    let mut all = Vec::with_capacity(payloads.clone().map(|p| p.values().len()).sum());
    payloads.for_each(|p| all.extend_from_slice(p.values()));
    Cow::Owned(all)
}

/// Splits `values`, rows `stride` apart, into consecutive payloads of `rows[i]` rows of
/// `width` values (the first `width` of each row), which share the one buffer: the next
/// node that takes them together reads them in place.
fn unstack(values: Vec<f32>, rows: &[usize], width: usize, stride: usize) -> Vec<Payload> {
    let lens: Vec<usize> = rows.iter().map(|&r| r * width).collect();
    Payload::pieces(pack(values, rows.iter().sum(), width, stride), &lens)
}

/// The first `width` values of each of `total` rows `stride` apart, moved together.
fn pack(mut values: Vec<f32>, total: usize, width: usize, stride: usize) -> Vec<f32> {
    if stride != width {
        // In place: row `r` moves left onto values whose rows were moved already.
        for r in 1..total {
            values.copy_within(r * stride..r * stride + width, r * width);
        }
    }
    values.truncate(total * width);
    values
}

/// What a linear keeps for a message's backward: its input, and with an epilogue the
/// activation's input and output.
struct Saved {
    x: Payload,
    activation: Option<(Payload, Payload)>,
}

impl LinearOp {
    /// The forward's results, `z` packed (`total` rows `stride` apart), as the messages'
    /// payloads (`rows[i]` rows each) and, with an epilogue and a backward to come, each
    /// message's activation input and output to keep.
    fn outputs(&self, z: Vec<f32>, rows: &[usize], stride: usize, keep: bool) -> OutputPieces {
        let Some(f) = self.epilogue else { return (unstack(z, rows, self.out, stride), Vec::new()) };
        let lens: Vec<usize> = rows.iter().map(|&r| r * self.out).collect();
        let z = pack(z, rows.iter().sum(), self.out, stride);
        let mut y = Vec::with_capacity(z.len());
        f.with_scalar(MapInto(&z, &mut y));
        let y = Payload::pieces(y, &lens);
        if !keep {
            return (y, Vec::new());
        }
        let kept = Payload::pieces(z, &lens).into_iter().zip(y.iter().cloned()).collect();
        (y, kept)
    }

    /// The gradients `dy` of the messages' outputs as one matrix: through the epilogue's
    /// activation first when there is one (its input and output kept in `saved`).
    fn output_grads<'g>(&self, grads: &'g [Msg], saved: &[Saved]) -> Result<Cow<'g, [f32]>, OpError> {
        let Some(f) = self.epilogue else { return Ok(stack(grads.iter().map(|g| &g.payload))) };
        let mut dz = Vec::with_capacity(grads.iter().map(|g| g.payload.values().len()).sum());
        for (grad, kept) in grads.iter().zip(saved) {
            let Some((z, y)) = &kept.activation else {
                return Err(OpError::Unsupported { op: "a linear's epilogue without its saved values (internal)" });
            };
            f.with_scalar(GradInto(z.values(), y.values(), grad.payload.values(), &mut dz));
        }
        Ok(Cow::Owned(dz))
    }
}

/// Each message's output payload, and what an epilogue keeps of it for the backward.
type OutputPieces = (Vec<Payload>, Vec<(Payload, Payload)>);

impl NodeOp for LinearOp {
    fn intake(&self) -> Intake {
        Intake::Batches { waits: true }
    }

    /// One GEMM over the rows of all the messages (a message's rows are its payload's).
    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let rows = self.rows_of(msgs.iter().map(|m| m.payload.values().len()));
        let x = stack(msgs.iter().map(|m| &m.payload));
        let total: usize = rows.iter().sum();
        let (y, stride) = {
            let mut view = cx.params().group(self.group);
            msgs.iter().for_each(|m| view.note_read(instance_of(&m.state)));
            let (w, b, version) = (view.value(0), view.value(1), view.version());
            self.weight_t.serve(version, total);
            if total < 2 || !self.weight_t.takes(version, total) {
                // On W itself: one row through the GEMM crate's fast one-row path, several
                // by a kernel that reads W once.
                (kernels::linear_forward_rows(&x, w, b, self.inp, self.out), self.out)
            } else {
                let (out, inp) = (self.out, self.inp);
                let (wt, ld) = self.weight_t.at(version, |values| kernels::transpose(w, out, inp, values));
                (kernels::linear_forward_t(&x, wt, b, inp, ld), ld)
            }
        };
        let (ys, kept) = self.outputs(y, &rows, stride, cx.training());
        let mut kept = kept.into_iter();
        for (msg, y) in msgs.into_iter().zip(ys) {
            if cx.training() {
                let saved = Saved { x: msg.payload.clone(), activation: kept.next() };
                self.cache.put(cx.key(&msg.state), saved)?;
            }
            cx.forward(0, msg.with_payload(y));
        }
        Ok(())
    }

    /// One GEMM for the input gradients of all the messages (none when no parameter is
    /// behind the input: zeros go back), under one lock of the group, which adds the
    /// weight gradient later, over many batches (`GroupView::linear_grads`).
    fn backward_batch(&mut self, cx: &mut NodeCx, _port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let saved = grads.iter().map(|g| self.cache.take(&cx.key(&g.state))).collect::<Result<Vec<Saved>, _>>()?;
        let xs: Vec<&Payload> = saved.iter().map(|s| &s.x).collect();
        let rows = self.rows_of(xs.iter().map(|x| x.values().len()));
        for (grad, &r) in grads.iter().zip(&rows) {
            if grad.payload.values().len() != r * self.out {
                return Err(OpError::PayloadSize { expected: r * self.out, found: grad.payload.values().len() });
            }
        }
        // In pieces: the deferred products copy them once (a contiguous run is one piece).
        let x: Vec<&[f32]> = match Payload::contiguous(xs.iter().copied()) {
            Some(all) => vec![all],
            None => xs.iter().map(|x| x.values()).collect(),
        };
        let dy = self.output_grads(&grads, &saved)?;
        let total: usize = rows.iter().sum();
        let (dx, stride) = {
            let mut view = cx.params().group(self.group);
            let (w, version, out, inp) = (view.value(0), view.version(), self.out, self.inp);
            let (dx, ld) = if !self.input_grad {
                (vec![0.0; total * inp], inp)
            } else {
                self.weight_p.serve(version, total);
                let padded = kernels::padded(inp) != inp && self.weight_p.takes(version, total);
                let skinny = !padded && total >= SKINNY_DX_FROM_ROWS && !self.weight_p.pays();
                let (w, ld) = if padded {
                    self.weight_p.at(version, |values| kernels::pad_rows(w, out, inp, values))
                } else {
                    (w, inp)
                };
                let dx = if skinny {
                    let mut dx = vec![0.0; total * ld];
                    kernels::rows_times_w(&dy, w, &mut dx, inp, out);
                    dx
                } else {
                    kernels::linear_input_grad(&dy, w, ld, out)
                };
                (dx, ld)
            };
            view.linear_grads(&dy, &x, self.inp, self.out);
            grads.iter().for_each(|g| view.note_gradient(instance_of(&g.state)));
            (dx, ld)
        };
        for (grad, dx) in grads.into_iter().zip(unstack(dx, &rows, self.inp, stride)) {
            cx.backward(0, grad.with_payload(dx));
        }
        Ok(())
    }

    fn held(&self) -> usize {
        self.cache.len()
    }
}

/// The instance a message belongs to (the first state field, see
/// `sched::admission::source_message`), for the group's staleness.
fn instance_of(state: &[i64]) -> Option<usize> {
    state.first().and_then(|&i| usize::try_from(i).ok())
}

/// `x * w + b` along the last axis (a LayerNorm's scale and shift, `w` and `b` `[dim]`),
/// caching `x` for the backward: `dx = dy * w`, and `dy * x`, `dy` summed over the rows
/// into the accumulators, in the reference's order.
pub(crate) struct AffineOp {
    group: usize,
    dim: usize,
    cache: Keyed<Payload>,
}

impl AffineOp {
    pub fn new(node: &NodeInfo) -> Result<AffineOp, OpError> {
        let group = node.group.ok_or(OpError::Unsupported { op: "affine without parameters" })?;
        Ok(AffineOp { group, dim: last_dim(node.inputs.first()).max(1), cache: Keyed::new() })
    }
}

impl NodeOp for AffineOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let y: Vec<f32> = {
            let mut view = cx.params().group(self.group);
            view.note_read(instance_of(&msg.state));
            let (w, b) = (view.value(0), view.value(1));
            if w.len() != self.dim || b.len() != self.dim {
                return Err(OpError::PayloadSize { expected: self.dim, found: w.len().min(b.len()) });
            }
            let rows = msg.payload.values().chunks(self.dim);
            rows.flat_map(|row| row.iter().zip(w).zip(b).map(|((x, w), b)| x * w + b)).collect()
        };
        if cx.training() {
            self.cache.put(cx.key(&msg.state), msg.payload.clone())?;
        }
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let x = self.cache.take(&cx.key(&grad.state))?;
        let (x, dy) = (x.values(), grad.payload.values());
        if x.len() != dy.len() {
            return Err(OpError::PayloadSize { expected: x.len(), found: dy.len() });
        }
        let dim = self.dim;
        let dx: Vec<f32> = {
            let mut view = cx.params().group(self.group);
            let w = view.value(0).to_vec();
            if let Some(mut accs) = view.dense_grads() {
                if let [gw, gb, ..] = accs.as_mut_slice() {
                    for (gr, xr) in dy.chunks(dim).zip(x.chunks(dim)) {
                        gw.iter_mut().zip(gr.iter().zip(xr)).for_each(|(acc, (g, x))| *acc += g * x);
                    }
                    for gr in dy.chunks(dim) {
                        gb.iter_mut().zip(gr).for_each(|(acc, g)| *acc += g);
                    }
                }
            }
            view.note_gradient(instance_of(&grad.state));
            dy.chunks(dim).flat_map(|gr| gr.iter().zip(&w).map(|(g, w)| g * w)).collect()
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
    /// A lookup feeds a Linear layer (Tree-LSTM's leaves, list-reduce's tokens): a worker
    /// step's rows go into one buffer that the Linear reads in place. Every message's row
    /// is found before any is copied (the walks into the instances' data overlap), and the
    /// table's lock is taken once per step.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let rows = msgs.iter().map(|m| self.row(cx, &m.state)).collect::<Result<Vec<_>, _>>()?;
        let mut out = Stacked::with_capacity(rows.len() * self.dim);
        {
            let mut view = cx.params().group(self.group);
            for msg in &msgs {
                view.note_read(instance_of(&msg.state));
            }
            let table = view.value(0);
            for &row in &rows {
                out.push(|values| values.extend_from_slice(&table[row * self.dim..(row + 1) * self.dim]));
            }
        }
        let mut out = out.payloads();
        for msg in msgs {
            cx.forward(0, msg.with_payload(out.next().unwrap_or(Payload::Unit)));
        }
        Ok(())
    }

    /// Each gradient added into its row's accumulator in order, under one lock.
    fn backward_batch(&mut self, cx: &mut NodeCx, _port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let rows = grads.iter().map(|g| self.row(cx, &g.state)).collect::<Result<Vec<_>, _>>()?;
        {
            let mut view = cx.params().group(self.group);
            for (grad, &row) in grads.iter().zip(&rows) {
                if let Some(acc) = view.row_grad(row, self.dim) {
                    kernels::axpy(1.0, grad.payload.values(), acc);
                }
                view.note_gradient(instance_of(&grad.state));
            }
        }
        for grad in grads {
            cx.backward(0, grad.with_payload(Payload::Unit));
        }
        Ok(())
    }
}

/// `embedding_rows @P %r [INDEX] [COUNT]` (a batched map's `emb(k)`): COUNT table rows as
/// one batch, row `r` the table's row INDEX evaluated with `%r` = r; backward adds each
/// row's gradient into its table row's accumulator (an index-add, rows in order, as the
/// per-element lookups add theirs). It caches nothing: the gradient's state recomputes
/// the rows.
pub(crate) struct EmbeddingRowsOp {
    lookup: EmbeddingOp,
    field: usize,
    count: StateExpr,
}

impl EmbeddingRowsOp {
    pub fn new(
        node: &NodeInfo,
        field: amp_ir::FieldId,
        index: StateExpr,
        count: StateExpr,
        access: &ParamAccess,
    ) -> Result<EmbeddingRowsOp, OpError> {
        let lookup = EmbeddingOp::new(node, index, access)?;
        Ok(EmbeddingRowsOp { lookup, field: usize::from(field.0), count })
    }

    /// The table row of every output row.
    fn rows(&self, cx: &NodeCx, state: &[i64]) -> Result<Vec<usize>, OpError> {
        let count = cx.eval_count(&self.count, state, "embedding_rows row count")?;
        let mut state = state.to_vec();
        let mut rows = Vec::with_capacity(count);
        for r in 0..count {
            super::set_field(&mut state, self.field, r as i64)?;
            rows.push(self.lookup.row(cx, &state)?);
        }
        Ok(rows)
    }
}

impl NodeOp for EmbeddingRowsOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let rows = self.rows(cx, &msg.state)?;
        let dim = self.lookup.dim;
        let values = {
            let mut view = cx.params().group(self.lookup.group);
            view.note_read(instance_of(&msg.state));
            let table = view.value(0);
            let mut values = Vec::with_capacity(rows.len() * dim);
            for row in rows {
                values.extend_from_slice(&table[row * dim..(row + 1) * dim]);
            }
            values
        };
        cx.forward(0, msg.with_payload(Payload::from_vec(values)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let rows = self.rows(cx, &grad.state)?;
        let dim = self.lookup.dim;
        let dy = grad.payload.values();
        if dy.len() != rows.len() * dim {
            return Err(OpError::PayloadSize { expected: rows.len() * dim, found: dy.len() });
        }
        {
            let mut view = cx.params().group(self.lookup.group);
            for (r, row) in rows.into_iter().enumerate() {
                if let Some(acc) = view.row_grad(row, dim) {
                    kernels::axpy(1.0, &dy[r * dim..(r + 1) * dim], acc);
                }
            }
            view.note_gradient(instance_of(&grad.state));
        }
        cx.backward(0, grad.with_payload(Payload::Unit));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::program::GroupInfo;
    use crate::ops::train::live_groups;
    use crate::ops::{Emit, RunMode, RunShared};
    use amp_ir::{FieldId, Op, ParamInit};
    use amp_params::{OptimState, OptimizerKind, ParamSet, ParamSpec};

    /// A GEMM's result with padded rows (stride 4, width 3) becomes one payload per
    /// message of its rows, packed, sharing one buffer that the next Linear reads in
    /// place when it takes the messages in order.
    #[test]
    fn a_batch_result_is_unstacked_into_pieces_of_one_buffer() {
        let padded: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let pieces = unstack(padded, &[1, 0, 2, 1], 3, 4);
        let values: Vec<&[f32]> = pieces.iter().map(Payload::values).collect();
        let expected: [&[f32]; 4] = [&[0.0, 1.0, 2.0], &[], &[4.0, 5.0, 6.0, 8.0, 9.0, 10.0], &[12.0, 13.0, 14.0]];
        assert_eq!(values, expected);
        let x = stack(pieces.iter());
        assert!(matches!(x, Cow::Borrowed(_)), "read in place");
        assert_eq!(x.len(), 12);
        // Out of order they are copied, in the order given.
        let swapped = stack([&pieces[3], &pieces[0]].into_iter());
        assert!(matches!(swapped, Cow::Owned(_)));
        assert_eq!(&*swapped, &[12.0, 13.0, 14.0, 0.0, 1.0, 2.0]);
    }

    const INP: usize = 7;
    const OUT: usize = 5;

    fn node() -> NodeInfo {
        let linear = NodeInfo::for_test(1, Op::Linear { param: "l".into() }, &[(0, 0)], &[&[(2, 0)]]);
        NodeInfo {
            label: "l".into(),
            inputs: vec![PayloadTy::F32(vec![INP as u64])],
            outputs: vec![PayloadTy::F32(vec![OUT as u64])],
            key: vec![FieldId(0), FieldId(1)],
            fan_in_key: vec![FieldId(0), FieldId(1)],
            group: Some(0),
            ..linear
        }
    }

    fn params() -> ParamSet {
        let spec = |name: &str, shape: Vec<usize>| ParamSpec {
            name: name.into(),
            shape,
            init: ParamInit::Uniform { fan_in: INP as u64 },
        };
        ParamSet::init(&[spec("l.weight", vec![OUT, INP]), spec("l.bias", vec![OUT])], 3)
    }

    fn msg(instance: i64, t: i64) -> Msg {
        let values = (0..INP).map(|i| ((instance * 7 + t * 3 + i as i64) % 11) as f32 / 5.0 - 1.0).collect();
        Msg::new(Payload::from_vec(values), vec![instance, t].into_boxed_slice())
    }

    fn grad(m: &Msg) -> Msg {
        let values = (0..OUT).map(|o| (m.state[0] as f32 - o as f32 * 0.5) * 0.1).collect();
        m.sibling(Payload::from_vec(values))
    }

    /// Runs `f` on a fresh linear op with live parameters; returns what it emitted, the
    /// op's held entries and the accumulated gradients.
    fn run(f: impl FnOnce(&mut LinearOp, &mut NodeCx)) -> (Vec<Emit>, usize, ParamSet) {
        run_on(node(), f)
    }

    /// [`run`] on the linear `node`.
    fn run_on(node: NodeInfo, f: impl FnOnce(&mut LinearOp, &mut NodeCx)) -> (Vec<Emit>, usize, ParamSet) {
        let mut params = params();
        let mut grads = params.zeros_like();
        let mut optim = OptimState::new(&OptimizerKind::Sgd, params.specs());
        let groups = vec![GroupInfo {
            prefix: "l".into(),
            tensors: vec![0, 1],
            nodes: vec![1],
            owner: 0,
            min_update_frequency: 1,
            max_staleness: None,
            master: None,
            replica_groups: Vec::new(),
            frozen: false,
            ring: Vec::new(),
        }];
        let held = {
            let live = live_groups(&groups, &mut params, &mut grads, &mut optim.tensors, &mut [], &[], true);
            let shared = RunShared {
                instances: Vec::new(),
                params: ParamAccess::live_run(live),
                mode: RunMode::Train,
                routes: Default::default(),
                dropout: None,
            };
            let mut op = LinearOp::new(&node, &shared.params).unwrap();
            let mut out = Vec::new();
            let mut cx = NodeCx::new(&node, &shared, &mut out);
            f(&mut op, &mut cx);
            (out, op.held())
        };
        (held.0, held.1, grads)
    }

    fn payloads(emits: &[Emit]) -> Vec<(Box<[i64]>, Vec<f32>)> {
        emits
            .iter()
            .map(|e| match e {
                Emit::Forward { msg, .. } | Emit::Backward { msg, .. } => {
                    (msg.state.clone(), msg.payload.values().to_vec())
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    fn assert_close(a: &[(Box<[i64]>, Vec<f32>)], b: &[(Box<[i64]>, Vec<f32>)]) {
        assert_eq!(a.len(), b.len());
        for ((sa, va), (sb, vb)) in a.iter().zip(b) {
            assert_eq!(sa, sb, "keys and order are kept");
            for (x, y) in va.iter().zip(vb) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
            }
        }
    }

    /// Every path: lone rows through the crate on `W`, batches on `W` through
    /// `kernels::skinny` until `COPY_PAYS_FROM_ROWS` rows were served, then on the padded
    /// copies (7 and 5 are not multiples of the panel width), which later batches of any
    /// size use.
    #[test]
    fn a_batch_computes_what_its_messages_compute_alone() {
        let msgs: Vec<Msg> = (0..80).map(|i| msg(i, 2 * i)).collect();
        // Gradients come back in another order than the forward messages went.
        let back: Vec<Msg> = (0..80).map(|i| grad(&msgs[i * 37 % 80])).collect();
        let (alone, held_alone, grads_alone) = run(|op, cx| {
            msgs.iter().for_each(|m| op.forward(cx, 0, m.clone()).unwrap());
            back.iter().for_each(|g| op.backward(cx, 0, g.clone()).unwrap());
        });
        let (batched, held_batched, grads_batched) = run(|op, cx| {
            for batch in [&msgs[..1], &msgs[1..5], &msgs[5..70], &msgs[70..72], &msgs[72..]] {
                op.forward_batch(cx, 0, batch.to_vec()).unwrap();
            }
            assert_eq!(op.held(), 80, "each message cached under its own key");
            for batch in [&back[..1], &back[1..3], &back[3..11], &back[11..75], &back[75..]] {
                op.backward_batch(cx, 0, batch.to_vec()).unwrap();
            }
            assert_eq!((op.weight_t.version, op.weight_p.version), (Some(0), Some(0)), "both copies were made");
        });
        assert_eq!((held_alone, held_batched), (0, 0));
        assert_close(&payloads(&batched), &payloads(&alone));
        for ((_, a), (_, b)) in grads_batched.iter().zip(grads_alone.iter()) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "accumulated gradient {x} vs {y}");
            }
        }
    }

    /// Marks the group's values as changed, as an update does.
    fn bump_version(cx: &NodeCx) {
        if let ParamAccess::Live { groups, .. } = cx.params() {
            groups[0].lock().unwrap().version += 1;
        }
    }

    /// A weight that serves few rows per version (a MoE expert's) is never copied: the
    /// batches after the first take `W` itself (`kernels::skinny` from 2 rows forward and
    /// `SKINNY_DX_FROM_ROWS` backward) and compute what lone messages do.
    #[test]
    fn a_weight_updated_after_every_batch_is_used_in_place() {
        let msgs: Vec<Msg> = (0..30).map(|i| msg(i, i)).collect();
        let back: Vec<Msg> = msgs.iter().rev().map(grad).collect();
        let (alone, _, grads_alone) = run(|op, cx| {
            msgs.iter().for_each(|m| op.forward(cx, 0, m.clone()).unwrap());
            back.iter().for_each(|g| op.backward(cx, 0, g.clone()).unwrap());
        });
        let (batched, held, grads_batched) = run(|op, cx| {
            for batch in [&msgs[..3], &msgs[3..5], &msgs[5..17], &msgs[17..]] {
                op.forward_batch(cx, 0, batch.to_vec()).unwrap();
                bump_version(cx);
            }
            for batch in [&back[..2], &back[2..7], &back[7..20], &back[20..]] {
                op.backward_batch(cx, 0, batch.to_vec()).unwrap();
                bump_version(cx);
            }
            assert_eq!((op.weight_t.version, op.weight_p.version), (None, None), "no copy of W was made");
        });
        assert_eq!(held, 0);
        assert_close(&payloads(&batched), &payloads(&alone));
        for ((_, a), (_, b)) in grads_batched.iter().zip(grads_alone.iter()) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "accumulated gradient {x} vs {y}");
            }
        }
    }

    #[test]
    fn empty_batches_do_nothing_and_one_is_a_lone_message() {
        let (emits, held, grads) = run(|op, cx| {
            op.forward_batch(cx, 0, Vec::new()).unwrap();
            op.backward_batch(cx, 0, Vec::new()).unwrap();
        });
        assert!(emits.is_empty() && held == 0);
        assert!(grads.iter().all(|(_, g)| g.iter().all(|&v| v == 0.0)));
        let m = msg(1, 1);
        let (one, _, g1) = run(|op, cx| {
            op.forward_batch(cx, 0, vec![m.clone()]).unwrap();
            op.backward_batch(cx, 0, vec![grad(&m)]).unwrap();
        });
        let (alone, _, g2) = run(|op, cx| {
            op.forward(cx, 0, m.clone()).unwrap();
            op.backward(cx, 0, grad(&m)).unwrap();
        });
        assert_eq!(payloads(&one), payloads(&alone));
        assert_eq!(g1, g2);
    }

    /// A linear with an epilogue emits, and sends back, what the linear and then the
    /// `unary` op compute, bit for bit, batch by batch; it holds nothing after.
    #[test]
    fn an_epilogue_computes_what_the_unary_op_after_the_linear_does() {
        let msgs: Vec<Msg> = (0..40).map(|i| msg(i, i)).collect();
        let back: Vec<Msg> = msgs.iter().rev().map(grad).collect();
        let cuts = [0, 1, 9, 40];
        let batches = |all: &[Msg]| -> Vec<Vec<Msg>> { cuts.windows(2).map(|w| all[w[0]..w[1]].to_vec()).collect() };
        for f in [UnaryFn::Relu, UnaryFn::Tanh, UnaryFn::Sigmoid, UnaryFn::Gelu] {
            // The linear alone, the unary op's forward and backward computed from its outputs.
            let mut ys = Vec::new();
            let (plain, _, plain_grads) = run(|op, cx| {
                batches(&msgs).into_iter().for_each(|b| op.forward_batch(cx, 0, b).unwrap());
                let zs: Vec<Vec<f32>> = payloads(cx.out).into_iter().map(|(_, z)| z).collect();
                ys = zs.iter().map(|z| f.forward_elements(z).unwrap()).collect();
                let through: Vec<Msg> = back
                    .iter()
                    .map(|g| {
                        let i = g.state[0] as usize;
                        g.sibling(Payload::from_vec(f.backward_elements(&zs[i], &ys[i], g.payload.values()).unwrap()))
                    })
                    .collect();
                batches(&through).into_iter().for_each(|b| op.backward_batch(cx, 0, b).unwrap());
            });
            let mut with = node();
            with.epilogue = Some(crate::load::program::Activation { node: 2, f });
            let (fused, held, fused_grads) = run_on(with, |op, cx| {
                batches(&msgs).into_iter().for_each(|b| op.forward_batch(cx, 0, b).unwrap());
                batches(&back).into_iter().for_each(|b| op.backward_batch(cx, 0, b).unwrap());
            });
            let (fused, plain) = (payloads(&fused), payloads(&plain));
            let forward: Vec<Vec<f32>> = fused[..40].iter().map(|(_, y)| y.clone()).collect();
            assert_eq!(forward, ys, "{f:?}: the activation's outputs");
            assert_eq!(fused[40..], plain[40..], "{f:?}: the input gradients");
            assert_eq!(fused_grads, plain_grads, "{f:?}: the parameter gradients");
            assert_eq!(held, 0);
        }
    }

    #[test]
    fn a_batch_gradient_without_its_cache_is_refused() {
        let (_, _, _) = run(|op, cx| {
            op.forward_batch(cx, 0, vec![msg(0, 0)]).unwrap();
            let err = op.backward_batch(cx, 0, vec![grad(&msg(0, 0)), grad(&msg(9, 9))]).unwrap_err();
            assert!(matches!(err, OpError::MissingCache { .. }), "{err:?}");
        });
    }
}
