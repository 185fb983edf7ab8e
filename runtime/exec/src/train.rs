//! Parameters during a run: frozen (inference) or live (training), where each Ppt group
//! holds its tensors, their gradient accumulators and optimizer states behind a lock, and
//! its owner worker applies local updates.

use crate::program::GroupInfo;
use amp_params::optim::{clip_coefficient, global_norm, update_tensor};
use amp_params::{OptimConfig, OptimizerKind, ParamSet, TensorState};
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
    /// Whether a gradient may have been accumulated since the last update (true at the
    /// start of a run: accumulators can carry over from the last epoch).
    pub touched: bool,
    /// Bumped whenever the values change (see [`GroupView::version`]).
    pub version: u64,
    /// The rows of tensor 0 (`width` values each) that gradients reached since the last
    /// update, when that is all they reached (an embedding's table); `None` when unknown
    /// (at the start of a run accumulators can carry over from the last; a dense gradient).
    pub rows: Option<RowLog>,
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
    /// take the step (momentum and Adam move parameters on a zero gradient).
    pub fn update(&mut self, config: &OptimConfig) -> bool {
        if self.pending == 0 {
            return false;
        }
        let plain_sgd = config.kind == OptimizerKind::Sgd && config.weight_decay == 0.0;
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

    /// The bookkeeping of every update: nothing pending, accumulators (now zero) complete
    /// in the row log; `moved` when the values changed.
    fn finish_update(&mut self, moved: bool) {
        self.pending = 0;
        self.updates += 1;
        if moved {
            self.touched = false;
            self.version += 1;
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
        }
        self.finish_update(true);
    }
}

/// `(weight, bias, weight gradient, bias gradient)`.
pub(crate) type LinearParts<'v> = (&'v [f32], &'v [f32], &'v mut [f32], &'v mut [f32]);

/// How ops reach parameters in a run.
pub(crate) enum ParamAccess<'a> {
    /// Read-only (evaluation and inference): no locks, no gradients.
    Frozen { params: &'a ParamSet, groups: &'a [GroupInfo] },
    /// Training: one lock per group.
    Live { groups: Vec<Mutex<LiveGroup<'a>>> },
}

/// A group's tensors while an op uses them.
pub(crate) enum GroupView<'g, 'a> {
    Frozen(Vec<&'g [f32]>),
    Live(MutexGuard<'g, LiveGroup<'a>>),
}

impl GroupView<'_, '_> {
    /// Values of the group's `i`-th tensor (empty when there is none).
    pub fn value(&self, i: usize) -> &[f32] {
        match self {
            GroupView::Frozen(values) => values.get(i).copied().unwrap_or(&[]),
            GroupView::Live(g) => g.tensors.get(i).map_or(&[], |t| &*t.value),
        }
    }

    /// Changes whenever the group's values do (counting in this run; the op that reads it
    /// is built anew for every run): ops that keep something derived from the values,
    /// such as a transposed weight, make it again when the version moved.
    pub fn version(&self) -> u64 {
        match self {
            GroupView::Frozen(_) => 0,
            GroupView::Live(g) => g.version,
        }
    }

    /// The gradient accumulator of row `row` (`width` values) of the group's first
    /// tensor (training only; `None` past its end), logged for the row-sparse update.
    pub fn row_grad(&mut self, row: usize, width: usize) -> Option<&mut [f32]> {
        match self {
            GroupView::Frozen(_) => None,
            GroupView::Live(g) => {
                g.touched = true;
                if let Some(log) = &mut g.rows {
                    log.width = width;
                    log.rows.push(row);
                }
                g.tensors.first_mut().and_then(|t| t.grad.get_mut(row * width..(row + 1) * width))
            }
        }
    }

    /// Weight and bias of a linear group: values of both, gradients of both.
    pub fn linear_parts(&mut self) -> Option<LinearParts<'_>> {
        match self {
            GroupView::Frozen(_) => None,
            GroupView::Live(g) => {
                g.touched = true;
                g.rows = None;
                match g.tensors.as_mut_slice() {
                    [w, b, ..] => Some((&*w.value, &*b.value, &mut *w.grad, &mut *b.grad)),
                    _ => None,
                }
            }
        }
    }
}

impl<'a> ParamAccess<'a> {
    /// Locks (when live) and returns group `g`'s tensors.
    pub fn group(&self, g: usize) -> GroupView<'_, 'a> {
        match self {
            ParamAccess::Frozen { params, groups } => {
                let values = groups.get(g).map_or_else(Vec::new, |info| {
                    info.tensors.iter().map(|&i| if i < params.len() { params.data(i) } else { &[] }).collect()
                });
                GroupView::Frozen(values)
            }
            ParamAccess::Live { groups } => match groups.get(g) {
                Some(lock) => GroupView::Live(lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())),
                None => GroupView::Frozen(Vec::new()),
            },
        }
    }

    /// Locks a live group for its owner's bookkeeping.
    pub fn live(&self, g: usize) -> Option<MutexGuard<'_, LiveGroup<'a>>> {
        match self {
            ParamAccess::Live { groups } => {
                groups.get(g).map(|lock| lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
            }
            ParamAccess::Frozen { .. } => None,
        }
    }

    /// The live groups back, after the workers are gone.
    pub fn into_live_groups(self) -> Vec<LiveGroup<'a>> {
        match self {
            ParamAccess::Live { groups } => {
                groups.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner())).collect()
            }
            ParamAccess::Frozen { .. } => Vec::new(),
        }
    }
}

/// The tensors of a replica's group during a run: a copy of its master's values, its own
/// gradient accumulators, and an optimizer state it never uses (the master updates).
#[derive(Default)]
pub(crate) struct ReplicaStore {
    values: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    optim: Vec<TensorState>,
}

/// One store per group: the master's current values for replica groups, empty for the
/// others.
pub(crate) fn replica_stores(groups: &[GroupInfo], params: &ParamSet) -> Vec<ReplicaStore> {
    groups
        .iter()
        .map(|info| match info.master {
            None => ReplicaStore::default(),
            Some(_) => {
                let values: Vec<Vec<f32>> =
                    info.tensors.iter().filter(|&&i| i < params.len()).map(|&i| params.data(i).to_vec()).collect();
                let grads = values.iter().map(|v| vec![0.0; v.len()]).collect();
                let optim = values.iter().map(|_| TensorState { step: 0, m: Vec::new(), v: Vec::new() }).collect();
                ReplicaStore { values, grads, optim }
            }
        })
        .collect()
}

/// Adds what the replicas accumulated and their masters have not gathered into `grads`
/// (at the end of a run: it carries over like any accumulated gradient).
pub(crate) fn fold_replica_grads(groups: &[GroupInfo], stores: &[ReplicaStore], grads: &mut ParamSet) {
    for (info, store) in groups.iter().zip(stores) {
        for (&i, acc) in info.tensors.iter().zip(&store.grads) {
            if i < grads.len() {
                grads.data_mut(i).iter_mut().zip(acc).for_each(|(g, x)| *g += x);
            }
        }
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
) -> Vec<LiveGroup<'a>> {
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
                return LiveGroup { tensors, pending: 0, updates: 0, touched: false, version: 0, rows };
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
            LiveGroup { tensors, pending, updates: 0, touched: true, version: 0, rows }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
