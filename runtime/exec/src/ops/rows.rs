//! Row work on batches and tensors: `gather` (one row), `scatter_sum` (rows added into
//! others), `gather_rows` (rows picked by an index per output row), `mask_rows` (rows
//! zeroed where a predicate fails), `partition_rows` and `merge_rows` (rows split among
//! a parameter array's arms and put back in order) and `reduce` (sum or mean of the rows,
//! or of every element). Their outputs'
//! sizes depend on run-time row counts, which training caches under the key for the
//! backward pass.

use super::{row_elements, set_field, Intake, Join, Keyed, NodeCx, NodeOp, Stacked};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{key_of, Key, KeyMap, Msg, Payload};
use crate::ops::kernels;
use amp_ir::{DataStep, FieldId, PayloadTy, ReduceFn, StateExpr};
use std::sync::Arc;

/// Keys a [`RowValues`] keeps before it drops the older half of what it keeps.
const ROW_VALUES_KEYS: usize = 1024;
/// Values (over all keys) a [`RowValues`] keeps before it drops the older half (and at most
/// as many checked indices beside them).
const ROW_VALUES_KEPT: usize = 1 << 20;

/// A row expression (an index or predicate with the row field bound to each row) and its
/// values at the rows of the batches it saw, kept under the message's instance and the
/// other state fields the expression reads. Each row's value is a lookup in the
/// instance's data, and the same rows come back at every step of a loop and in both
/// directions (GGSNN: its edges' kinds, sources and destinations, 4 to 20 times per
/// instance); looked up once, they were a quarter of its training time. The values are
/// a function of what the key holds (the data is the run's, fixed), so a kept value is
/// the one evaluation would give. Bounded: past `ROW_VALUES_KEYS` keys or
/// `ROW_VALUES_KEPT` values, the older of two generations goes (instances in flight
/// keep theirs in the newer one).
pub(crate) struct RowValues {
    field: usize,
    expr: StateExpr,
    /// For a data path with the row field as one index and nowhere else (`$.edges[%r].src`),
    /// that step's position: all rows are then read in one walk (`ExecInstance::ints_along`).
    along: Option<usize>,
    /// The state fields the expression reads besides the row field, and the instance.
    reads: Vec<FieldId>,
    current: KeyMap<Key, Kept>,
    kept: usize,
    previous: KeyMap<Key, Kept>,
}

/// A key's values, and the first rows of them checked as indices below a bound (every
/// step of a loop asks for the same ones: checked and converted once).
struct Kept {
    values: Arc<[i64]>,
    indices: Option<(usize, Arc<[usize]>)>,
}

impl RowValues {
    pub fn new(field: FieldId, expr: StateExpr) -> RowValues {
        let mut reads = vec![FieldId(0)];
        expr.fields(&mut reads);
        reads.retain(|&f| f != field || f == FieldId(0));
        reads.sort_unstable();
        reads.dedup();
        let along = match &expr {
            StateExpr::Data(path) => {
                let reads_row = |e: &StateExpr| {
                    let mut fields = Vec::new();
                    e.fields(&mut fields);
                    fields.contains(&field)
                };
                let at = path.iter().position(|s| matches!(s, DataStep::Index(e) if **e == StateExpr::Field(field)));
                let elsewhere = path
                    .iter()
                    .enumerate()
                    .any(|(i, s)| Some(i) != at && matches!(s, DataStep::Index(e) if reads_row(e)));
                at.filter(|_| !elsewhere)
            }
            _ => None,
        };
        let field = usize::from(field.0);
        RowValues { field, expr, along, reads, current: KeyMap::default(), kept: 0, previous: KeyMap::default() }
    }

    /// The values at the first `rows` rows in one walk of the data, when the expression
    /// is a path indexed by the row; `None` to evaluate row by row (which also tells
    /// why a path does not fit).
    fn along(&self, cx: &NodeCx, state: &[i64], rows: usize) -> Option<Vec<i64>> {
        let (StateExpr::Data(path), Some(at)) = (&self.expr, self.along) else { return None };
        // Row by row, setting a field past the state's end is an error: keep it one.
        state.get(self.field)?;
        let instance = cx.instance(state).ok()?;
        let prefix = amp_ir::resolve_path(&path[..at], state, instance)?;
        let suffix = amp_ir::resolve_path(&path[at + 1..], state, instance)?;
        instance.ints_along(&prefix, rows, &suffix)
    }

    /// The expression's value at each of the first `rows` rows of a batch whose message
    /// state is `state` (the row field set to the row); an evaluation's error as is.
    pub fn at(&mut self, cx: &NodeCx, state: &[i64], rows: usize, what: &'static str) -> Result<Arc<[i64]>, OpError> {
        let key = key_of(&self.reads, state);
        self.at_key(cx, key, state, rows, what)
    }

    fn at_key(
        &mut self,
        cx: &NodeCx,
        key: Key,
        state: &[i64],
        rows: usize,
        what: &'static str,
    ) -> Result<Arc<[i64]>, OpError> {
        if let Some(kept) = self.current.get(&key).filter(|k| k.values.len() >= rows) {
            return Ok(Arc::clone(&kept.values));
        }
        let kept = self.previous.remove(&key).map(|k| k.values).filter(|v| v.len() >= rows);
        let values = match kept.or_else(|| self.along(cx, state, rows).map(Arc::from)) {
            Some(values) => values,
            None => {
                let mut state = state.to_vec();
                let mut values = Vec::with_capacity(rows);
                for r in 0..rows {
                    set_field(&mut state, self.field, r as i64)?;
                    values.push(cx.eval(&self.expr, &state, what)?);
                }
                Arc::from(values)
            }
        };
        if self.current.len() >= ROW_VALUES_KEYS || self.kept + values.len() > ROW_VALUES_KEPT {
            self.previous = std::mem::take(&mut self.current);
            self.kept = 0;
        }
        self.kept += values.len();
        self.current.insert(key, Kept { values: Arc::clone(&values), indices: None });
        Ok(values)
    }

    /// As [`RowValues::at`], each value checked as an index below `len`.
    pub fn indices(
        &mut self,
        cx: &NodeCx,
        state: &[i64],
        rows: usize,
        what: &'static str,
        len: usize,
    ) -> Result<Arc<[usize]>, OpError> {
        let key = key_of(&self.reads, state);
        let checked = self.current.get(&key).and_then(|k| k.indices.as_ref());
        if let Some((_, indices)) = checked.filter(|(bound, i)| *bound == len && i.len() == rows) {
            return Ok(Arc::clone(indices));
        }
        let values = self.at_key(cx, key.clone(), state, rows, what)?;
        let indices: Arc<[usize]> = values[..rows]
            .iter()
            .map(|&index| {
                // A `match`, not `ok_or`: that builds and drops an error at every row.
                match usize::try_from(index).ok().filter(|&i| i < len) {
                    Some(i) => Ok(i),
                    None => Err(OpError::OutOfRange { what, index, len }),
                }
            })
            .collect::<Result<_, _>>()?;
        if let Some(kept) = self.current.get_mut(&key) {
            kept.indices = Some((len, Arc::clone(&indices)));
        }
        Ok(indices)
    }
}

/// `gather [INDEX]`: row INDEX of a batch, or of a tensor's leading dimension; backward,
/// zeros of the input's size with that row's gradient.
pub(crate) struct GatherOp {
    index: StateExpr,
    /// Elements per row: the output's.
    row: usize,
    /// `(rows, index)` of each gather awaiting its gradient.
    cache: Keyed<(usize, usize)>,
}

impl GatherOp {
    pub fn new(index: StateExpr, node: &NodeInfo) -> GatherOp {
        let row = node.outputs.first().map_or(0, |t| row_elements(t).0);
        GatherOp { index, row, cache: Keyed::new() }
    }
}

impl NodeOp for GatherOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let x = msg.payload.values();
        let rows = x.len().checked_div(self.row).unwrap_or(0);
        let i = cx.eval_index(&self.index, &msg.state, "gather index", rows)?;
        let y = x[i * self.row..(i + 1) * self.row].to_vec();
        if cx.training() {
            self.cache.put(cx.key(&msg.state), (rows, i))?;
        }
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let (rows, i) = self.cache.take(&cx.key(&grad.state))?;
        let mut dx = vec![0.0; rows * self.row];
        dx[i * self.row..(i + 1) * self.row].copy_from_slice(grad.payload.values());
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.cache.len()
    }
}

/// `scatter_sum %r [INDEX] [COUNT]`: COUNT output rows, input row `i` added into row
/// INDEX evaluated with `%r` = i (rows in input order, so sums match the reference's);
/// backward, input row `i` gets its destination's gradient.
pub(crate) struct ScatterSumOp {
    index: RowValues,
    count: StateExpr,
    row: usize,
    /// The destination of every input row, and the output's row count.
    cache: Keyed<(Arc<[usize]>, usize)>,
}

impl ScatterSumOp {
    pub fn new(field: FieldId, index: StateExpr, count: StateExpr, node: &NodeInfo) -> ScatterSumOp {
        let row = node.inputs.first().map_or(0, |t| row_elements(t).0);
        ScatterSumOp { index: RowValues::new(field, index), count, row, cache: Keyed::new() }
    }
}

impl ScatterSumOp {
    /// Adds the rows of `msg`'s batch into `count` zero rows appended to `out`; keeps the
    /// destinations for the backward when training.
    fn scatter(&mut self, cx: &NodeCx, msg: &Msg, count: usize, out: &mut Vec<f32>) -> Result<(), OpError> {
        let x = msg.payload.values();
        let rows = x.len().checked_div(self.row).unwrap_or(0);
        let destinations = self.index.indices(cx, &msg.state, rows, "scatter_sum index", count)?;
        let start = out.len();
        out.resize(start + count * self.row, 0.0);
        let y = &mut out[start..];
        for (i, &j) in destinations.iter().enumerate() {
            kernels::axpy(1.0, &x[i * self.row..(i + 1) * self.row], &mut y[j * self.row..(j + 1) * self.row]);
        }
        if cx.training() {
            self.cache.put(cx.key(&msg.state), (destinations, count))?;
        }
        Ok(())
    }
}

impl NodeOp for ScatterSumOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let count = cx.eval_count(&self.count, &msg.state, "scatter_sum row count")?;
        let mut y = Vec::with_capacity(count * self.row);
        self.scatter(cx, &msg, count, &mut y)?;
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    /// The sums of all the messages taken together in one buffer: the Linear after
    /// (GGSNN's GRU input) reads them in place.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let counts = msgs.iter().map(|m| cx.eval_count(&self.count, &m.state, "scatter_sum row count"));
        let counts = counts.collect::<Result<Vec<_>, _>>()?;
        // The buffer sized once: grown message by message, it was copied as it grew.
        let mut sums = Stacked::with_capacity(counts.iter().sum::<usize>().saturating_mul(self.row));
        for (msg, &count) in msgs.iter().zip(&counts) {
            let mut scattered = Ok(());
            sums.push(|out| scattered = self.scatter(cx, msg, count, out));
            scattered?;
        }
        let mut sums = sums.payloads();
        for msg in msgs {
            cx.forward(0, msg.with_payload(sums.next().unwrap_or(Payload::Unit)));
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let (destinations, count) = self.cache.take(&cx.key(&grad.state))?;
        let dy = grad.payload.values();
        if dy.len() != count * self.row {
            return Err(OpError::PayloadSize { expected: count * self.row, found: dy.len() });
        }
        let mut dx = Vec::with_capacity(destinations.len() * self.row);
        for &j in destinations.iter() {
            dx.extend_from_slice(&dy[j * self.row..(j + 1) * self.row]);
        }
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.cache.len()
    }
}

/// `gather_rows %r [INDEX] [COUNT]`: COUNT output rows, row `r` a copy of input row INDEX
/// evaluated with `%r` = r; backward, each output row's gradient added into its source
/// row (in output-row order, as the per-element lowering's gathers sum theirs).
pub(crate) struct GatherRowsOp {
    index: RowValues,
    count: StateExpr,
    row: usize,
    /// The source row of every output row, and the input's row count.
    cache: Keyed<(Arc<[usize]>, usize)>,
}

impl GatherRowsOp {
    pub fn new(field: FieldId, index: StateExpr, count: StateExpr, node: &NodeInfo) -> GatherRowsOp {
        let row = node.inputs.first().map_or(0, |t| row_elements(t).0);
        GatherRowsOp { index: RowValues::new(field, index), count, row, cache: Keyed::new() }
    }
}

impl NodeOp for GatherRowsOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let x = msg.payload.values();
        let rows = x.len().checked_div(self.row).unwrap_or(0);
        let count = cx.eval_count(&self.count, &msg.state, "gather_rows row count")?;
        let sources = self.index.indices(cx, &msg.state, count, "gather_rows index", rows)?;
        let mut y = Vec::with_capacity(count * self.row);
        for &i in sources.iter() {
            y.extend_from_slice(&x[i * self.row..(i + 1) * self.row]);
        }
        if cx.training() {
            self.cache.put(cx.key(&msg.state), (sources, rows))?;
        }
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let (sources, rows) = self.cache.take(&cx.key(&grad.state))?;
        let dy = grad.payload.values();
        if dy.len() != sources.len() * self.row {
            return Err(OpError::PayloadSize { expected: sources.len() * self.row, found: dy.len() });
        }
        let mut dx = vec![0.0; rows * self.row];
        for (r, i) in sources.iter().enumerate() {
            kernels::axpy(1.0, &dy[r * self.row..(r + 1) * self.row], &mut dx[i * self.row..(i + 1) * self.row]);
        }
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.cache.len()
    }
}

/// `mask_rows %r [PRED]`: row `r` passes where PRED (with `%r` = r) holds, zeros elsewhere;
/// backward the same on the gradient. It keeps nothing: the mask is the state's and the
/// data's, which the gradient's message carries too.
pub(crate) struct MaskRowsOp {
    pred: RowValues,
    row: usize,
}

impl MaskRowsOp {
    pub fn new(field: FieldId, pred: StateExpr, node: &NodeInfo) -> MaskRowsOp {
        let row = node.inputs.first().map_or(0, |t| row_elements(t).0);
        MaskRowsOp { pred: RowValues::new(field, pred), row }
    }

    /// `values` with the rows whose predicate fails set to zero (not multiplied: an
    /// infinite value in a dropped row must not become NaN).
    fn mask(&mut self, cx: &NodeCx, state: &[i64], values: Vec<f32>) -> Result<Vec<f32>, OpError> {
        let mut values = values;
        let rows = values.len().div_ceil(self.row.max(1));
        let keep = self.pred.at(cx, state, rows, "mask_rows predicate")?;
        for (row, &keep) in values.chunks_mut(self.row.max(1)).zip(keep.iter()) {
            if keep == 0 {
                row.fill(0.0);
            }
        }
        Ok(values)
    }
}

impl NodeOp for MaskRowsOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let Msg { payload, state } = msg;
        let y = self.mask(cx, &state, payload.into_vec())?;
        cx.forward(0, Msg::new(Payload::from_vec(y), state));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let Msg { payload, state } = grad;
        let dx = self.mask(cx, &state, payload.into_vec())?;
        cx.backward(0, Msg::new(Payload::from_vec(dx), state));
        Ok(())
    }
}

/// `rows` rows of `row` elements each, in `arms` parts by `arm_of` (each part's rows in
/// order).
fn partition(values: &[f32], row: usize, arm_of: &[usize], arms: usize) -> Vec<Vec<f32>> {
    let mut counts = vec![0usize; arms];
    for &k in arm_of {
        counts[k] += 1;
    }
    let mut parts: Vec<Vec<f32>> = counts.iter().map(|&c| Vec::with_capacity(c * row)).collect();
    partition_into(values, row, arm_of, &mut parts);
    parts
}

/// Appends each row of `values` to its arm's part, in one pass.
fn partition_into(values: &[f32], row: usize, arm_of: &[usize], parts: &mut [Vec<f32>]) {
    for (r, &k) in arm_of.iter().enumerate() {
        parts[k].extend_from_slice(&values[r * row..(r + 1) * row]);
    }
}

/// The inverse of [`partition`]: row `r` is the next unused row of part `arm_of[r]`. A part
/// whose size is not its rows' is an error.
fn merge(parts: &[&[f32]], row: usize, arm_of: &[usize]) -> Result<Vec<f32>, OpError> {
    let mut counts = vec![0usize; parts.len()];
    for &k in arm_of {
        counts[k] += 1;
    }
    for (part, &c) in parts.iter().zip(&counts) {
        if part.len() != c * row {
            return Err(OpError::PayloadSize { expected: c * row, found: part.len() });
        }
    }
    let mut next = vec![0usize; parts.len()];
    let mut out = Vec::with_capacity(arm_of.len() * row);
    for &k in arm_of {
        let at = next[k];
        out.extend_from_slice(&parts[k][at * row..(at + 1) * row]);
        next[k] += 1;
    }
    Ok(out)
}

/// The rows a batch payload of `len` elements holds (none for zero-width rows).
fn rows_in(len: usize, row: usize) -> Result<usize, OpError> {
    let rows = len.checked_div(row).unwrap_or(0);
    if rows * row != len {
        return Err(OpError::PayloadSize { expected: rows * row, found: len });
    }
    Ok(rows)
}

/// What `partition_rows` and `merge_rows` share: the row field, the arm index, the arm
/// count and the row's width, from which both split a batch among the arms and put the
/// arms' rows back in order, in either direction.
struct ArmRows {
    /// Each row's arm, recomputed from the message's state in either direction (the
    /// gradient's is the forward's), so neither op caches anything under its key.
    index: RowValues,
    arms: usize,
    row: usize,
}

impl ArmRows {
    /// `values`, a batch whose message state is `state`, in one part per arm.
    fn split(&mut self, cx: &NodeCx, values: &[f32], state: &[i64]) -> Result<Vec<Vec<f32>>, OpError> {
        let rows = rows_in(values.len(), self.row)?;
        let arm_of = self.index.indices(cx, state, rows, "row arm index", self.arms)?;
        Ok(partition(values, self.row, &arm_of, self.arms))
    }

    /// The batches of `msgs` split among the arms as [`ArmRows::split`] does, each arm's
    /// parts of all of them in one buffer; per message, its part for each arm in arm order.
    fn split_batch(&mut self, cx: &NodeCx, msgs: &[Msg]) -> Result<Vec<Vec<Payload>>, OpError> {
        let mut arm_rows = Vec::with_capacity(msgs.len());
        let mut counts = vec![0usize; self.arms];
        for msg in msgs {
            let rows = rows_in(msg.payload.values().len(), self.row)?;
            let arm_of = self.index.indices(cx, &msg.state, rows, "row arm index", self.arms)?;
            arm_of.iter().for_each(|&k| counts[k] += 1);
            arm_rows.push(arm_of);
        }
        // Each arm's buffer sized once: grown row by row, it was copied as it grew. One
        // pass over each message's rows; each arm's piece of it is what that pass added.
        let mut parts: Vec<Vec<f32>> = counts.iter().map(|&c| Vec::with_capacity(c * self.row)).collect();
        let mut lens: Vec<Vec<usize>> = vec![Vec::with_capacity(msgs.len()); self.arms];
        for (msg, arm_of) in msgs.iter().zip(&arm_rows) {
            let before: Vec<usize> = parts.iter().map(Vec::len).collect();
            partition_into(msg.payload.values(), self.row, arm_of, &mut parts);
            for ((lens, part), before) in lens.iter_mut().zip(&parts).zip(before) {
                lens.push(part.len() - before);
            }
        }
        let mut arms: Vec<_> =
            parts.into_iter().zip(&lens).map(|(values, lens)| Payload::pieces(values, lens).into_iter()).collect();
        Ok(msgs.iter().map(|_| arms.iter_mut().map(|a| a.next().unwrap_or(Payload::Unit)).collect()).collect())
    }

    /// The arms' parts (joined by key, in port order) as one batch in row order, in a
    /// sibling of the first part's message; `None` for no parts.
    fn merge(&mut self, cx: &NodeCx, parts: &[Msg]) -> Result<Option<Msg>, OpError> {
        let mut rows = 0;
        for part in parts {
            rows += rows_in(part.payload.values().len(), self.row)?;
        }
        let Some(first) = parts.first() else { return Ok(None) };
        let arm_of = self.index.indices(cx, &first.state, rows, "row arm index", self.arms)?;
        let slices: Vec<&[f32]> = parts.iter().map(|p| p.payload.values()).collect();
        Ok(Some(first.sibling(Payload::from_vec(merge(&slices, self.row, &arm_of)?))))
    }
}

/// `partition_rows %r [INDEX] ARMS`: output `k` gets the input rows whose INDEX (with
/// `%r` = the row) is `k`, in order, so each arm's layer runs on its own rows only;
/// backward joins the arms' gradients by key and puts their rows back in place.
pub(crate) struct PartitionRowsOp {
    rows: ArmRows,
    grads: Join,
}

impl PartitionRowsOp {
    pub fn new(field: FieldId, index: StateExpr, arms: usize, node: &NodeInfo) -> PartitionRowsOp {
        let row = node.inputs.first().map_or(0, |t| row_elements(t).0);
        PartitionRowsOp { rows: ArmRows { index: RowValues::new(field, index), arms, row }, grads: Join::new(arms) }
    }
}

impl NodeOp for PartitionRowsOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        for (k, part) in self.rows.split(cx, msg.payload.values(), &msg.state)?.into_iter().enumerate() {
            cx.forward(k as u16, msg.sibling(Payload::from_vec(part)));
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, port: u16, grad: Msg) -> Result<(), OpError> {
        let key = cx.key(&grad.state);
        let Some((_, parts)) = self.grads.offer(key, usize::from(port), grad)? else { return Ok(()) };
        if let Some(dx) = self.rows.merge(cx, &parts)? {
            cx.backward(0, dx);
        }
        Ok(())
    }

    /// Each arm's rows of all the messages taken together in one buffer: the arm's Linear
    /// reads them in place.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let parts = self.rows.split_batch(cx, &msgs)?;
        for (msg, parts) in msgs.into_iter().zip(parts) {
            for (k, part) in parts.into_iter().enumerate() {
                cx.forward(k as u16, msg.sibling(part));
            }
        }
        Ok(())
    }

    fn held(&self) -> usize {
        self.grads.len()
    }
}

/// `merge_rows %r [INDEX] ARMS`: joins the arms' batches by key; output row `r` is the
/// next row of input INDEX (with `%r` = r), the order `partition_rows` took them from;
/// backward partitions the gradient the same way.
pub(crate) struct MergeRowsOp {
    rows: ArmRows,
    join: Join,
}

impl MergeRowsOp {
    pub fn new(field: FieldId, index: StateExpr, arms: usize, node: &NodeInfo) -> MergeRowsOp {
        let row = node.outputs.first().map_or(0, |t| row_elements(t).0);
        MergeRowsOp { rows: ArmRows { index: RowValues::new(field, index), arms, row }, join: Join::new(arms) }
    }
}

impl NodeOp for MergeRowsOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let key = cx.key(&msg.state);
        let Some((_, parts)) = self.join.offer(key, usize::from(port), msg)? else { return Ok(()) };
        if let Some(y) = self.rows.merge(cx, &parts)? {
            cx.forward(0, y);
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        for (k, part) in self.rows.split(cx, grad.payload.values(), &grad.state)?.into_iter().enumerate() {
            cx.backward(k as u16, grad.sibling(Payload::from_vec(part)));
        }
        Ok(())
    }

    /// Each arm's gradient rows of all the messages taken together in one buffer: the
    /// arm's Linear reads them in place.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn backward_batch(&mut self, cx: &mut NodeCx, _port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let parts = self.rows.split_batch(cx, &grads)?;
        for (grad, parts) in grads.into_iter().zip(parts) {
            for (k, part) in parts.into_iter().enumerate() {
                cx.backward(k as u16, grad.sibling(part));
            }
        }
        Ok(())
    }

    fn held(&self) -> usize {
        self.join.len()
    }
}

/// `reduce sum|mean`: of a batch, the elementwise sum or mean of its rows (`f32[d]`); of
/// a tensor, the sum or mean of all its elements (a scalar). As the reference evaluator:
/// a batch's mean is its sum times `1 / rows`, a tensor's mean its sum divided by the
/// count; the mean of nothing is an error, the sum of no rows zeros.
pub(crate) struct ReduceOp {
    f: ReduceFn,
    /// Elements per row of a batch input; `None` for a tensor input.
    batch_row: Option<usize>,
    /// Rows of each batch reduced, awaiting its gradient.
    rows: Keyed<usize>,
}

impl ReduceOp {
    pub fn new(f: ReduceFn, node: &NodeInfo) -> ReduceOp {
        let batch_row = match node.inputs.first() {
            Some(ty @ PayloadTy::Batch(_)) => Some(row_elements(ty).0),
            _ => None,
        };
        ReduceOp { f, batch_row, rows: Keyed::new() }
    }

    fn reduce_rows(&mut self, cx: &mut NodeCx, msg: Msg, row: usize) -> Result<(), OpError> {
        let x = msg.payload.values();
        let rows = x.len().checked_div(row).unwrap_or(0);
        if self.f == ReduceFn::Mean && rows == 0 {
            return Err(OpError::Empty { what: "mean" });
        }
        let mut y = vec![0.0; row];
        for r in x.chunks_exact(row.max(1)).take(rows) {
            kernels::axpy(1.0, r, &mut y);
        }
        if self.f == ReduceFn::Mean {
            let factor = 1.0 / rows as f32;
            y.iter_mut().for_each(|v| *v *= factor);
        }
        if cx.training() {
            self.rows.put(cx.key(&msg.state), rows)?;
        }
        cx.forward(0, msg.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn reduce_all(&mut self, cx: &mut NodeCx, msg: Msg) -> Result<(), OpError> {
        let x = msg.payload.values();
        let total: f32 = x.iter().sum();
        let y = match self.f {
            ReduceFn::Sum => total,
            ReduceFn::Mean if x.is_empty() => return Err(OpError::Empty { what: "mean" }),
            ReduceFn::Mean => total / x.len() as f32,
        };
        cx.forward(0, msg.with_payload(Payload::from_vec(vec![y])));
        Ok(())
    }
}

impl NodeOp for ReduceOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        match self.batch_row {
            Some(row) => self.reduce_rows(cx, msg, row),
            None => self.reduce_all(cx, msg),
        }
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let dy = grad.payload.values();
        let dx = match self.batch_row {
            Some(_) => {
                let rows = self.rows.take(&cx.key(&grad.state))?;
                let share: Vec<f32> = match self.f {
                    ReduceFn::Sum => dy.to_vec(),
                    ReduceFn::Mean => {
                        let factor = 1.0 / rows as f32;
                        dy.iter().map(|g| factor * g).collect()
                    }
                };
                share.repeat(rows)
            }
            None => {
                let n = cx.node.inputs.first().map_or(0, |t| row_elements(t).0);
                let g = dy.first().copied().unwrap_or(0.0);
                let share = match self.f {
                    ReduceFn::Sum => g,
                    ReduceFn::Mean => g / n as f32,
                };
                vec![share; n]
            }
        };
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.rows.len()
    }
}
