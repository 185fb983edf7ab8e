//! Parameters during a run: frozen (inference) or live (training), where each Ppt group
//! holds its tensors, their gradient accumulators and optimizer states behind a lock, and
//! its owner worker applies local updates.

mod access;
mod replicas;
mod staleness;

pub(crate) use access::ParamAccess;
pub(crate) use replicas::{
    add_replica_grads, fold_replica_grads, gather_grads, replica_stores, set_replica_values, sync_values,
    take_replica_grads, ReplicaStore,
};
pub(crate) use staleness::Staleness;
pub use staleness::StalenessStats;

use crate::load::program::GroupInfo;
use crate::ops::kernels;
pub(crate) use crate::protocol::ReplicaGrads;
use amp_params::optim::{clip_coefficient, global_norm, update_tensor};
use amp_params::{OptimConfig, OptimizerKind, ParamSet, TensorState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// One tensor of a live group.
pub(crate) struct LiveTensor<'a> {
    pub value: &'a mut [f32],
    pub grad: &'a mut [f32],
    pub optim: &'a mut TensorState,
}

/// A Ppt group during training: its tensors in `GroupInfo::tensors` order and the number
/// of instances finished since its last update.
pub(crate) struct LiveGroup<'a> {
    pub tensors: Vec<LiveTensor<'a>>,
    pub pending: u64,
    /// Updates applied in this run.
    pub updates: u64,
    /// Whether a gradient may have been accumulated since the last update (at the start
    /// of a run, when instances carried over from the last one are pending).
    pub touched: bool,
    /// Bumped whenever the values change (see [`GroupView::version`]).
    pub version: u64,
    /// The rows of tensor 0 (`width` values each) that gradients reached since the last
    /// update, when that is all they reached (an embedding's table); `None` when unknown
    /// (at the start of a run accumulators can carry over from the last; a dense gradient).
    pub rows: Option<RowLog>,
    /// Weight-gradient products not yet added to tensor 0's accumulator (a linear group).
    pub deferred: DeferredProducts,
    /// Whether tensor 0's accumulator may hold a gradient: false when all of the weight
    /// gradient since the last update is still in `deferred` (then plain SGD adds the
    /// products straight to the weight, see [`LiveGroup::update`]).
    pub accumulated: bool,
    /// Never updated (`ExecConfig::frozen`): ops add no gradient to it.
    pub frozen: bool,
    /// The rows of tensor 0 the last update moved when it moved no others (plain SGD on
    /// a table's logged rows: [`LiveGroup::update_rows`]), sorted; `None` when it may have
    /// moved every value. What a replica synced after every update takes back.
    pub moved_rows: Option<RowLog>,
    /// Which versions the instances in flight read, and the staleness of the gradients
    /// applied so far in this run.
    pub staleness: Staleness,
}

/// The weight gradient `dy^T x` of a linear group's backward batches, kept as the rows of
/// `dy` and `x` and added to the accumulator as one GEMM once [`DEFERRED_ROWS`] rows are
/// there, and always before anything reads the accumulator (an update, a master gathering
/// a replica's gradients, the group's end). A batch of a few rows makes the product a
/// rank-few update of the whole `[out, inp]` accumulator, which reads and writes all of it
/// for little arithmetic (memory-bound); deferred, the same sum runs at the GEMM's speed.
/// The buffers keep their capacity: at most `DEFERRED_ROWS × (inp + out)` values a group.
pub(crate) struct DeferredProducts {
    inp: usize,
    out: usize,
    dy: Vec<f32>,
    x: Vec<f32>,
    /// Rows kept before they are added: [`DEFERRED_ROWS`], or 1 when deferring is off
    /// (`ExecConfig::defer_weight_grads`).
    limit: usize,
}

impl Default for DeferredProducts {
    fn default() -> DeferredProducts {
        DeferredProducts::keeping(DEFERRED_ROWS)
    }
}

/// The rows from which deferred weight-gradient products are added up.
const DEFERRED_ROWS: usize = 256;

impl DeferredProducts {
    /// Products that are added once `limit` rows (at least 1) are kept.
    pub fn keeping(limit: usize) -> DeferredProducts {
        DeferredProducts { inp: 0, out: 0, dy: Vec::new(), x: Vec::new(), limit: limit.max(1) }
    }

    fn rows(&self) -> usize {
        self.x.len().checked_div(self.inp).unwrap_or(0)
    }
}

/// The rows of a table that gradients reached, in arrival order (repeats allowed).
#[derive(Default)]
pub(crate) struct RowLog {
    pub width: usize,
    pub rows: Vec<usize>,
}

impl LiveGroup<'_> {
    /// Applies the mean of the accumulated gradients (clipped over the group when
    /// configured) and clears the accumulators. Returns whether it updated.
    ///
    /// A group no instance used since its last update (an expert no instance was routed
    /// to) has zero gradients; under plain SGD without weight decay its update changes
    /// nothing, so only the optimizer's step count moves, and the pass over the tensors,
    /// which dominated training of a 64-expert MoE, is skipped. Other optimizers still
    /// take the step (momentum and Adam move parameters on a zero gradient). Under plain
    /// SGD without clipping, a linear group whose weight gradient is all in its deferred
    /// products adds them straight to the weight ([`LiveGroup::update_from_deferred`]).
    /// The sums are the same in another order: a run that splits an update's instances
    /// over two calls (gradients carried over in the accumulator) agrees to f32 rounding,
    /// not bit for bit.
    pub fn update(&mut self, config: &OptimConfig) -> bool {
        if self.pending == 0 {
            return false;
        }
        if self.frozen {
            // The instances are counted (the update interval starts again) and nothing moves.
            self.pending = 0;
            return false;
        }
        let plain_sgd = config.kind == OptimizerKind::Sgd && config.weight_decay == 0.0;
        if plain_sgd && config.clip_norm.is_none() && !self.accumulated && self.update_from_deferred(config) {
            return true;
        }
        self.settle();
        if !self.touched && plain_sgd {
            self.tensors.iter_mut().for_each(|t| t.optim.step += 1);
            self.finish_update(false);
            return true;
        }
        if plain_sgd && self.tensors.len() == 1 {
            if let Some(log) = self.rows.take() {
                self.update_rows(config, log);
                return true;
            }
        }
        let mut scale = 1.0 / self.pending as f32;
        if let Some(max_norm) = config.clip_norm {
            let norm = global_norm(self.tensors.iter().map(|t| &*t.grad), scale);
            scale *= clip_coefficient(norm, max_norm);
        }
        for t in &mut self.tensors {
            update_tensor(config, t.optim, t.value, t.grad, scale);
            t.grad.iter_mut().for_each(|g| *g = 0.0);
        }
        self.finish_update(true);
        true
    }

    /// Adds the deferred weight-gradient products to the accumulator.
    pub fn settle(&mut self) {
        let d = &mut self.deferred;
        if d.x.is_empty() {
            return;
        }
        if let Some(w) = self.tensors.first_mut() {
            kernels::linear_weight_grad(&d.dy, &d.x, w.grad, d.inp, d.out);
            self.accumulated = true;
        }
        d.dy.clear();
        d.x.clear();
    }

    /// Moves the deferred weight-gradient rows of `replica` (a copy of this linear group) to
    /// the end of this group's, to be added with them in one product, at the update when
    /// nothing else is in the weight's accumulator ([`LiveGroup::update_from_deferred`]).
    /// False, nothing moved, where the replica has none or their shapes differ. Rows past
    /// this group's limit settle its own first, as the op's batches would.
    pub(super) fn take_deferred(&mut self, replica: &mut LiveGroup) -> bool {
        let r = &mut replica.deferred;
        let d = &self.deferred;
        if r.x.is_empty() || (!d.x.is_empty() && (d.inp, d.out) != (r.inp, r.out)) {
            return false;
        }
        if d.rows() + r.rows() > d.limit {
            self.settle();
        }
        let d = &mut self.deferred;
        (d.inp, d.out) = (r.inp, r.out);
        d.dy.append(&mut r.dy);
        d.x.append(&mut r.x);
        true
    }

    /// Plain SGD on a linear group whose weight gradient is all in the deferred products:
    /// `W -= lr/n · dyᵀx` as one GEMM into the weight, `b` as usual. Materialising the
    /// gradient first, then reading it back and clearing it, made three passes over a
    /// weight-sized accumulator per update (most of a 64-expert MoE's update time). False
    /// (nothing done) when the group is not such a group.
    fn update_from_deferred(&mut self, config: &OptimConfig) -> bool {
        let [w, b] = self.tensors.as_mut_slice() else { return false };
        let d = &mut self.deferred;
        if d.x.is_empty() || w.value.len() != d.inp * d.out {
            return false;
        }
        let scale = 1.0 / self.pending as f32;
        d.dy.iter_mut().for_each(|v| *v *= -config.lr * scale);
        kernels::linear_weight_grad(&d.dy, &d.x, w.value, d.inp, d.out);
        d.dy.clear();
        d.x.clear();
        w.optim.step += 1;
        update_tensor(config, b.optim, b.value, b.grad, scale);
        b.grad.iter_mut().for_each(|g| *g = 0.0);
        self.finish_update(true);
        true
    }

    /// The bookkeeping of every update: nothing pending, accumulators (now zero) complete
    /// in the row log; `moved` when the values changed.
    fn finish_update(&mut self, moved: bool) {
        self.moved_rows = None;
        self.staleness.measure(self.version);
        self.pending = 0;
        self.updates += 1;
        if moved {
            self.touched = false;
            self.accumulated = false;
            self.version += 1;
            self.staleness.base = self.version;
        }
        self.rows = Some(RowLog::default());
    }

    /// Plain SGD on the logged rows only: the other rows' gradients are zero, so this is
    /// the dense update (same values, same clipping norm) at a fraction of the cost on a
    /// large embedding table.
    fn update_rows(&mut self, config: &OptimConfig, mut log: RowLog) {
        log.rows.sort_unstable();
        log.rows.dedup();
        let pending = self.pending.max(1);
        if let Some(t) = self.tensors.first_mut() {
            let w = log.width;
            let len = t.grad.len().min(t.value.len());
            let rows: Vec<usize> = log.rows.into_iter().filter(|r| (r + 1) * w <= len).collect();
            let mut scale = 1.0 / pending as f32;
            if let Some(max_norm) = config.clip_norm {
                let norm = global_norm(rows.iter().map(|&r| &t.grad[r * w..(r + 1) * w]), scale);
                scale *= clip_coefficient(norm, max_norm);
            }
            for &r in &rows {
                let (value, grad) = (&mut t.value[r * w..(r + 1) * w], &mut t.grad[r * w..(r + 1) * w]);
                for (p, g) in value.iter_mut().zip(grad.iter_mut()) {
                    *p -= config.lr * (*g * scale);
                    *g = 0.0;
                }
            }
            t.optim.step += 1;
            self.finish_update(true);
            self.moved_rows = Some(RowLog { width: w, rows });
            return;
        }
        self.finish_update(true);
    }
}

impl Drop for LiveGroup<'_> {
    /// The accumulators a run leaves are complete.
    fn drop(&mut self) {
        self.settle();
    }
}

/// Splits parameters, accumulators and optimizer states into live groups (every tensor
/// belongs to at most one group besides replica groups, whose tensors are in `stores`).
pub(crate) fn live_groups<'a>(
    groups: &[GroupInfo],
    params: &'a mut ParamSet,
    grads: &'a mut ParamSet,
    optim: &'a mut [TensorState],
    stores: &'a mut [ReplicaStore],
    pending: &[u64],
    defer: bool,
) -> Vec<LiveGroup<'a>> {
    let deferred = || DeferredProducts::keeping(if defer { DEFERRED_ROWS } else { 1 });
    let mut values: Vec<Option<&'a mut [f32]>> = params.iter_mut().map(|(_, v)| Some(v)).collect();
    let mut accs: Vec<Option<&'a mut [f32]>> = grads.iter_mut().map(|(_, v)| Some(v)).collect();
    let mut states: Vec<Option<&'a mut TensorState>> = optim.iter_mut().map(Some).collect();
    let mut stores = stores.iter_mut();
    groups
        .iter()
        .enumerate()
        .map(|(g, info)| {
            let store = stores.next();
            if let (Some(_), Some(store)) = (info.master, store) {
                let tensors = store
                    .values
                    .iter_mut()
                    .zip(store.grads.iter_mut())
                    .zip(store.optim.iter_mut())
                    .map(|((value, grad), optim)| LiveTensor { value, grad, optim })
                    .collect();
                let rows = Some(RowLog::default());
                return LiveGroup {
                    tensors,
                    pending: 0,
                    updates: 0,
                    touched: false,
                    version: 0,
                    rows,
                    deferred: deferred(),
                    accumulated: false,
                    frozen: info.frozen,
                    moved_rows: None,
                    staleness: Staleness::default(),
                };
            }
            let tensors = info
                .tensors
                .iter()
                .filter_map(|&i| {
                    let value = values.get_mut(i)?.take()?;
                    let grad = accs.get_mut(i)?.take()?;
                    let optim = states.get_mut(i)?.take()?;
                    Some(LiveTensor { value, grad, optim })
                })
                .collect();
            let pending = pending.get(g).copied().unwrap_or(0);
            // Accumulators carried over hold the gradients of counted instances only: with
            // none pending they are zero, and the row log starts complete.
            let rows = (pending == 0).then(RowLog::default);
            LiveGroup {
                tensors,
                pending,
                updates: 0,
                touched: pending > 0,
                version: 0,
                rows,
                deferred: deferred(),
                accumulated: pending > 0,
                frozen: info.frozen,
                moved_rows: None,
                staleness: Staleness::default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::access::GroupView;
    use super::*;

    fn two_states() -> Vec<TensorState> {
        (0..2).map(|_| TensorState { step: 0, m: Vec::new(), v: Vec::new() }).collect()
    }

    /// Whether `a` equals `b` to f32 rounding (the same sums in another order).
    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6 * (1.0 + y.abs()))
    }

    /// A linear group (`[w, b]`) with `pending` instances counted and nothing deferred.
    fn linear_group<'a>(
        [w, b]: [&'a mut [f32]; 2],
        [dw, db]: [&'a mut [f32]; 2],
        states: &'a mut [TensorState],
        pending: u64,
        accumulated: bool,
    ) -> LiveGroup<'a> {
        let [sw, sb] = states else { panic!("two states") };
        LiveGroup {
            tensors: vec![LiveTensor { value: w, grad: dw, optim: sw }, LiveTensor { value: b, grad: db, optim: sb }],
            pending,
            updates: 0,
            touched: false,
            version: 0,
            rows: None,
            deferred: DeferredProducts::default(),
            accumulated,
            frozen: false,
            moved_rows: None,
            staleness: Staleness::default(),
        }
    }

    /// A replica's gradients moved across processes (`take_replica_grads` on its side,
    /// `add_replica_grads` on its master's) leave both groups as `gather_grads` in memory
    /// does: the master's accumulators (to f32 rounding: in memory the replica's deferred
    /// rows join the master's, across processes they are settled first), its flags, row
    /// log and read versions; the replica emptied. With the replica's rows known (an
    /// Embedding's) and not (dense), and untouched.
    #[test]
    fn a_replicas_gradients_moved_between_processes_equal_a_gather_in_memory() {
        let (inp, out) = (3, 2);
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * 29 + seed * 11) % 19) as f32 / 9.0 - 1.0).collect()
        };
        for case in 0..3 {
            // (master's accumulators, flags, rows, applied) and the replica's after.
            let run = |moved: bool| {
                let (mut w, mut b, mut rw, mut rb) = (values(6, 1), values(2, 2), values(6, 1), values(2, 2));
                let (mut dw, mut db) = (values(6, 3), values(2, 4));
                let (mut rdw, mut rdb) = (values(6, 5), values(2, 6));
                let (mut states, mut replica_states) = (two_states(), two_states());
                let mut master = linear_group([&mut w, &mut b], [&mut dw, &mut db], &mut states, 2, true);
                // Its accumulators hold gradients (settled earlier), besides its deferred rows.
                let mut replica = linear_group([&mut rw, &mut rb], [&mut rdw, &mut rdb], &mut replica_states, 0, true);
                master.rows = Some(RowLog { width: 3, rows: vec![1] });
                if case < 2 {
                    replica.touched = true;
                    replica.deferred.inp = inp;
                    replica.deferred.out = out;
                    replica.deferred.dy = values(out, 7);
                    replica.deferred.x = values(inp, 8);
                    replica.rows = (case == 0).then(|| RowLog { width: 3, rows: vec![0, 1] });
                }
                replica.staleness.read(5);
                replica.staleness.gradient(5);
                if moved {
                    let grads = take_replica_grads(&mut replica);
                    add_replica_grads(&mut master, grads);
                } else {
                    gather_grads(&mut master, &mut replica);
                }
                let rows = master.rows.as_ref().map(|r| (r.width, r.rows.clone()));
                let flags = (master.touched, master.accumulated, replica.touched, replica.accumulated);
                let applied: Vec<(usize, u64)> = master.staleness.applied.iter().map(|(&i, &v)| (i, v)).collect();
                let replica_rows = replica.rows.as_ref().map(|r| r.rows.len());
                let left = replica.deferred.x.len();
                drop((master, replica));
                (dw, db, rdw, rdb, flags, rows, applied, replica_rows, left)
            };
            let (mut memory, moved) = (run(false), run(true));
            assert!(close(&memory.0, &moved.0), "case {case}: {:?} vs {:?}", memory.0, moved.0);
            memory.0.clone_from(&moved.0);
            assert_eq!(memory, moved, "case {case}");
            assert_eq!(moved.6, vec![(5, 0)], "case {case}: the read's version travels");
            if case < 2 {
                assert!(moved.2.iter().all(|&g| g == 0.0), "case {case}: the replica is emptied");
                assert_ne!(moved.0, values(6, 3), "case {case}: the master took the gradients");
            }
        }
    }

    /// Plain SGD over two copies of a linear group whose weight gradients are all in their
    /// deferred rows (the usual state between updates): the gather moves the replica's rows
    /// to the master's, leaves the weight's accumulators alone, and the update adds every
    /// row to the weight in one product; the values equal, to f32 rounding, settling each
    /// copy's rows and summing the accumulators first.
    #[test]
    fn a_replicas_deferred_rows_join_the_masters_update() {
        let (inp, out) = (3, 2);
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * 31 + seed * 13) % 23) as f32 / 11.0 - 1.0).collect()
        };
        let config = OptimConfig::sgd(0.5);
        let run = |settled_first: bool| {
            let (mut w, mut b, mut rw, mut rb) = (values(6, 1), values(2, 2), values(6, 1), values(2, 2));
            let (mut dw, mut db, mut rdw, mut rdb) = (vec![0.0; 6], values(2, 3), vec![0.0; 6], values(2, 4));
            let (mut states, mut replica_states) = (two_states(), two_states());
            let mut master = linear_group([&mut w, &mut b], [&mut dw, &mut db], &mut states, 4, false);
            let mut replica = linear_group([&mut rw, &mut rb], [&mut rdw, &mut rdb], &mut replica_states, 0, false);
            for (group, seed) in [(&mut master, 5), (&mut replica, 7)] {
                group.touched = true;
                (group.deferred.inp, group.deferred.out) = (inp, out);
                group.deferred.dy = values(2 * out, seed);
                group.deferred.x = values(2 * inp, seed + 1);
            }
            if settled_first {
                master.settle();
                replica.settle();
            }
            gather_grads(&mut master, &mut replica);
            let state = (master.accumulated, master.deferred.rows(), replica.deferred.rows(), replica.accumulated);
            assert!(master.update(&config));
            drop((master, replica));
            (w, b, rdw, rdb, state)
        };
        let (joined, settled) = (run(false), run(true));
        assert_eq!(joined.4, (false, 4, 0, false), "the rows joined the master's, no accumulator touched");
        assert_eq!(settled.4, (true, 0, 0, false));
        assert!(close(&joined.0, &settled.0), "{:?} vs {:?}", joined.0, settled.0);
        assert_ne!(joined.0, values(6, 1), "the weight moved");
        assert_eq!((&joined.1, &joined.2, &joined.3), (&settled.1, &settled.2, &settled.3));
        assert!(joined.3.iter().all(|&g| g == 0.0), "the replica's bias gradient was taken");
    }

    /// An Embedding's replica sends the rows its gradients reached, each once and in
    /// order, not its whole table; added to the master, they make the accumulator and row
    /// log of a gather in memory (the rows updated, and their values, are the same).
    #[test]
    fn a_tables_replica_sends_only_the_rows_it_reached() {
        let width = 2;
        let run = |moved: bool| {
            let (mut table, mut grad) = (vec![0.5; 10], vec![0.25; 10]);
            let (mut replica_table, mut replica_grad) = (vec![0.5; 10], vec![0.0; 10]);
            let (mut states, mut replica_states) = (two_states(), two_states());
            let group = |value, grad, optim, pending| LiveGroup {
                tensors: vec![LiveTensor { value, grad, optim }],
                pending,
                updates: 0,
                touched: pending > 0,
                version: 0,
                rows: None,
                deferred: DeferredProducts::default(),
                accumulated: pending > 0,
                frozen: false,
                moved_rows: None,
                staleness: Staleness::default(),
            };
            let mut master = group(&mut table[..], &mut grad[..], &mut states[0], 1);
            master.rows = Some(RowLog { width, rows: vec![4] });
            let mut replica = group(&mut replica_table[..], &mut replica_grad[..], &mut replica_states[0], 0);
            // Rows 3 and 1 reached, row 3 twice.
            for (row, x) in [(3, 1.0), (1, -2.0), (3, 0.5)] {
                replica.tensors[0].grad[row * width..(row + 1) * width].iter_mut().for_each(|g| *g += x);
            }
            replica.touched = true;
            replica.rows = Some(RowLog { width, rows: vec![3, 1, 3] });
            let sent = if moved {
                let grads = take_replica_grads(&mut replica);
                let sent = (grads.tensors.clone(), grads.rows.clone());
                add_replica_grads(&mut master, grads);
                Some(sent)
            } else {
                gather_grads(&mut master, &mut replica);
                None
            };
            let mut rows = master.rows.as_ref().map(|r| r.rows.clone()).unwrap_or_default();
            rows.sort_unstable();
            rows.dedup();
            drop((master, replica));
            (grad, replica_grad, rows, sent)
        };
        let (memory, moved) = (run(false), run(true));
        assert_eq!((&memory.0, &memory.1, &memory.2), (&moved.0, &moved.1, &moved.2));
        let (tensors, rows) = moved.3.expect("what was sent");
        assert_eq!(rows, Some((2, vec![1, 3])), "each row once, in order");
        assert_eq!(tensors, vec![vec![-2.0, -2.0, 1.5, 1.5]], "two rows of the table, not ten values");
    }

    /// Deferred weight-gradient products add up to the direct ones: before a settle (what
    /// an update does first), across the automatic flushes, and when the group ends.
    #[test]
    fn deferred_weight_gradients_equal_the_direct_ones() {
        let (inp, out) = (7, 5);
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * 31 + seed * 17) % 23) as f32 / 11.0 - 1.0).collect()
        };
        // Batches of 1 to 9 rows, more than twice DEFERRED_ROWS in all.
        let batches: Vec<(Vec<f32>, Vec<f32>)> =
            (0..120).map(|b| (values((b % 9 + 1) * out, b), values((b % 9 + 1) * inp, b + 1000))).collect();
        assert!(batches.iter().map(|(dy, _)| dy.len() / out).sum::<usize>() > 2 * DEFERRED_ROWS);
        let (mut w, mut b) = (values(out * inp, 7), values(out, 8));
        let (mut dw, mut db) = (vec![0.0; out * inp], vec![0.0; out]);
        let (mut expected_dw, mut expected_db) = (vec![0.0; out * inp], vec![0.0; out]);
        let close = |found: &[f32], expected: &[f32], what: &str| {
            for (x, y) in found.iter().zip(expected) {
                assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{what}: {x} vs {y}");
            }
        };
        let mut states = two_states();
        {
            let group = Mutex::new(linear_group([&mut w, &mut b], [&mut dw, &mut db], &mut states, 0, false));
            for (i, (dy, x)) in batches.iter().enumerate() {
                assert!(GroupView::Live(group.lock().unwrap()).linear_grads(dy, &[x], inp, out));
                let mut g = group.lock().unwrap();
                kernels::linear_weight_grad(dy, x, &mut expected_dw, inp, out);
                kernels::linear_bias_grad(dy, &mut expected_db);
                close(g.tensors[1].grad, &expected_db, "the bias gradient, at once");
                if i == 50 {
                    g.settle();
                    close(g.tensors[0].grad, &expected_dw, "the weight gradient, settled");
                }
            }
            assert!(group.lock().unwrap().touched);
        }
        close(&dw, &expected_dw, "the weight gradient, at the group's end");
        assert_ne!(dw, vec![0.0; out * inp]);
    }

    /// Plain SGD straight from the deferred products (the weight never materialises its
    /// gradient) moves a linear group as the dense update does, and leaves nothing behind;
    /// a gradient already in the accumulator (`accumulated`) takes the dense path.
    #[test]
    fn sgd_from_deferred_products_equals_the_dense_update() {
        let (inp, out) = (6, 4);
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * 37 + seed * 13) % 29) as f32 / 14.0 - 1.0).collect()
        };
        let (dy, x) = (values(5 * out, 1), values(5 * inp, 2));
        let run = |accumulated: bool| {
            let (mut w, mut b) = (values(out * inp, 3), values(out, 4));
            let (mut dw, mut db) = (vec![0.0; out * inp], vec![0.0; out]);
            let mut states = two_states();
            let group = Mutex::new(linear_group([&mut w, &mut b], [&mut dw, &mut db], &mut states, 3, accumulated));
            assert!(GroupView::Live(group.lock().unwrap()).linear_grads(&dy, &[&x], inp, out));
            let mut group = group.into_inner().unwrap();
            assert!(group.update(&OptimConfig::sgd(0.5)));
            assert!(group.deferred.x.is_empty() && !group.accumulated && group.version == 1);
            drop(group);
            assert!(dw.iter().chain(&db).all(|&g| g == 0.0), "accumulators cleared");
            (w, b, states[0].step)
        };
        let (fast, dense) = (run(false), run(true));
        for (x, y) in fast.0.iter().chain(&fast.1).zip(dense.0.iter().chain(&dense.1)) {
            assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} vs {y}");
        }
        assert_eq!(fast.2, dense.2);
        assert_ne!(fast.0, values(out * inp, 3), "the update moved the weight");
    }

    /// The row-sparse SGD update equals the dense one, clipping included.
    #[test]
    fn row_sparse_sgd_equals_the_dense_update() {
        let width = 3;
        // Gradients in rows 1 and 3 only.
        let grad: Vec<f32> =
            (0..5 * width).map(|i| if matches!(i / width, 1 | 3) { 0.5 + i as f32 } else { 0.0 }).collect();
        let values: Vec<f32> = (0..5 * width).map(|i| i as f32 * 0.1).collect();
        let run = |rows: Option<RowLog>| {
            let (mut value, mut grad) = (values.clone(), grad.clone());
            let mut optim = TensorState { step: 0, m: Vec::new(), v: Vec::new() };
            let mut group = LiveGroup {
                tensors: vec![LiveTensor { value: &mut value, grad: &mut grad, optim: &mut optim }],
                pending: 2,
                updates: 0,
                touched: true,
                version: 0,
                rows,
                deferred: DeferredProducts::default(),
                accumulated: true,
                frozen: false,
                moved_rows: None,
                staleness: Staleness::default(),
            };
            let config = OptimConfig::sgd(0.3).with_clip_norm(1.0);
            assert!(group.update(&config));
            drop(group);
            (value, grad, optim.step)
        };
        let dense = run(None);
        let sparse = run(Some(RowLog { width, rows: vec![3, 1, 3] }));
        assert_eq!(dense, sparse);
        assert!(dense.1.iter().all(|&g| g == 0.0));
        assert_ne!(dense.0, values, "the update moved the logged rows");
    }

    /// A frozen group takes no gradient and its updates move nothing (`--freeze`), under
    /// every optimizer (Adam would move a parameter on a zero gradient).
    #[test]
    fn a_frozen_group_takes_no_gradient_and_never_moves() {
        let (mut w, mut b) = (vec![0.5f32; 6], vec![0.25f32; 2]);
        let (mut dw, mut db) = (vec![0.0f32; 6], vec![0.0f32; 2]);
        let mut states = two_states();
        let mut group = linear_group([&mut w, &mut b], [&mut dw, &mut db], &mut states, 0, false);
        group.frozen = true;
        let lock = Mutex::new(group);
        assert!(!GroupView::Live(lock.lock().unwrap()).linear_grads(&[1.0, 2.0], &[&[1.0, 1.0, 1.0]], 3, 2));
        assert!(GroupView::Live(lock.lock().unwrap()).row_grad(0, 3).is_none());
        let mut group = lock.into_inner().unwrap();
        group.pending = 4;
        let adam = OptimConfig::adam(0.1).with_weight_decay(0.5);
        assert!(!group.update(&adam), "nothing was updated");
        assert_eq!((group.pending, group.updates, group.version), (0, 0, 0));
        assert!(group.tensors.iter().all(|t| t.optim.step == 0));
        drop(group);
        assert!(w.iter().all(|&x| x == 0.5) && b.iter().all(|&x| x == 0.25));
        assert!(dw.iter().chain(&db).all(|&g| g == 0.0));
    }

    /// Staleness counted by hand: instance 0 reads at version 0 twice, instance 1 at
    /// version 0; 0's gradients come and the group updates (version 0 → 1, both of 0's
    /// reads measured once, at 0); instance 2 reads at 1; 1's gradient is applied at the
    /// next update, to version 1 (staleness 1), with 2's (0); a replica read at the
    /// master's version 0 and applied at version 2 measures 2; an instance that ended with
    /// a read owed no gradient no longer holds the oldest read.
    #[test]
    fn staleness_counts_the_updates_between_a_read_and_its_gradient() {
        let (mut w, mut b) = (vec![0.5f32; 6], vec![0.0f32; 2]);
        let (mut dw, mut db) = (vec![0.0f32; 6], vec![0.0f32; 2]);
        let mut states = two_states();
        let mut group = linear_group([&mut w, &mut b], [&mut dw, &mut db], &mut states, 0, false);
        let config = OptimConfig::sgd(0.1);
        let update = |group: &mut LiveGroup| {
            group.pending = 1;
            group.touched = true;
            group.accumulated = true;
            group.tensors[0].grad.iter_mut().for_each(|g| *g = 1.0);
            assert!(group.update(&config));
        };
        let s = &mut group.staleness;
        s.read(0);
        s.read(0);
        s.read(1);
        assert_eq!(s.oldest_owed(|_| true), Some(0));
        s.gradient(0);
        s.gradient(0);
        update(&mut group);
        assert_eq!((group.version, group.staleness.last), (1, Some(0)));
        assert_eq!(group.staleness.stats, StalenessStats { gradients: 1, total: 0, max: 0 });
        let s = &mut group.staleness;
        s.read(2);
        s.gradient(1);
        s.gradient(2);
        assert_eq!(s.oldest_owed(|_| true), None);
        update(&mut group);
        assert_eq!((group.version, group.staleness.last), (2, Some(1)));
        assert_eq!(group.staleness.stats, StalenessStats { gradients: 3, total: 1, max: 1 });

        // A replica given the master's values at version 0 (sync_values sets its base).
        let (mut rw, mut rb) = (vec![0.5f32; 6], vec![0.0f32; 2]);
        let (mut rdw, mut rdb) = (vec![0.0f32; 6], vec![0.0f32; 2]);
        let mut rstates = two_states();
        let mut replica = linear_group([&mut rw, &mut rb], [&mut rdw, &mut rdb], &mut rstates, 0, false);
        replica.staleness.read(3);
        replica.staleness.gradient(3);
        gather_grads(&mut group, &mut replica);
        update(&mut group);
        assert_eq!((group.version, group.staleness.last), (3, Some(2)));
        assert_eq!(group.staleness.stats, StalenessStats { gradients: 4, total: 3, max: 2 });
        sync_values(&group, &mut replica, None);
        assert_eq!(replica.staleness.base, 3);

        // Instance 4 reads and ends without its gradient: only a live one's read counts.
        group.staleness.read(4);
        group.staleness.read(5);
        assert_eq!(group.staleness.oldest_owed(|i| i != 4), Some(3));
        assert_eq!(group.staleness.reads.len(), 1);
    }
}
